// What the secure-broker tests need of Kafka's Admin API that aiokafka lacks: SCRAM
// users and ACLs. Run from source (`java -cp <classpath> AdminTool.java ...`, Java 11+),
// with the broker's own jars on the classpath; nothing to build.
//
//   AdminTool <client.properties> scram <user> <password>
//       create the user (or set its password) for SCRAM-SHA-256 and SCRAM-SHA-512
//   AdminTool <client.properties> allow <principal> (<resource type> <name> <pattern type> <operation>)...
//       add ALLOW ACLs for the principal from any host, e.g. "allow User:app topic in literal read"

import java.io.FileInputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class AdminTool {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        try (Admin admin = Admin.create(props)) {
            switch (args[1]) {
                case "scram": {
                    // One request per mechanism: the broker refuses a user twice in one.
                    for (ScramMechanism mechanism :
                            List.of(ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)) {
                        List<UserScramCredentialAlteration> change = List.of(
                                new UserScramCredentialUpsertion(
                                        args[2], new ScramCredentialInfo(mechanism, 4096), args[3]));
                        admin.alterUserScramCredentials(change).all().get();
                    }
                    break;
                }
                case "allow": {
                    List<AclBinding> bindings = new ArrayList<>();
                    for (int i = 3; i + 3 < args.length; i += 4) {
                        bindings.add(new AclBinding(
                                new ResourcePattern(
                                        ResourceType.fromString(args[i].toUpperCase()),
                                        args[i + 1],
                                        PatternType.fromString(args[i + 2].toUpperCase())),
                                new AccessControlEntry(
                                        args[2], "*",
                                        AclOperation.fromString(args[i + 3].toUpperCase()),
                                        AclPermissionType.ALLOW)));
                    }
                    admin.createAcls(bindings).all().get();
                    break;
                }
                default:
                    throw new IllegalArgumentException("unknown command " + args[1]);
            }
        }
    }
}
