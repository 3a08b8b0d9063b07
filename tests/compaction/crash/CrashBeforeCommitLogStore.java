package clockwork.tests;

import io.delta.storage.LocalLogStore;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for local files, with a crash point for the compaction tests: when
 * the environment variable CLOCKWORK_TEST_CRASH_BEFORE_COMMIT names an operation (e.g.
 * MERGE), the first commit of that operation kills the job instead of being written.
 * Delta writes the data files first and the commit file last, through this method, so
 * the job dies after its data files exist and before any snapshot refers to them: the
 * Python driver (this JVM's parent) and the JVM both get SIGKILL, as `kill -9` would.
 */
public class CrashBeforeCommitLogStore extends LocalLogStore {
    public CrashBeforeCommitLogStore(Configuration conf) {
        super(conf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration conf)
            throws IOException {
        String operation = System.getenv("CLOCKWORK_TEST_CRASH_BEFORE_COMMIT");
        if (operation != null && path.getName().matches("\\d{20}\\.json")) {
            List<String> lines = new ArrayList<>();
            actions.forEachRemaining(lines::add);
            String wanted = "\"operation\":\"" + operation + "\"";
            if (lines.stream().anyMatch(line -> line.contains("\"commitInfo\"") && line.contains(wanted))) {
                System.err.println("CrashBeforeCommitLogStore: SIGKILL before writing " + path);
                ProcessHandle.current().parent().ifPresent(ProcessHandle::destroyForcibly);
                Runtime.getRuntime().halt(137);
            }
            actions = lines.iterator();
        }
        super.write(path, actions, overwrite, conf);
    }
}
