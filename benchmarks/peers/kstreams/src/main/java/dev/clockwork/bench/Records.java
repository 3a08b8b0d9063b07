package dev.clockwork.bench;

import java.nio.ByteBuffer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.streams.processor.TimestampExtractor;

/**
 * What both apps read and keep of the benchmarks' records: a number of the flat JSON
 * {"user","ts","amount"} found by its field's name, event time from "ts", and a window's
 * count and sum as 16 bytes.
 */
final class Records {
  private Records() {}

  /** Event time: the "ts" field of the JSON value (ms). */
  public static final class TsExtractor implements TimestampExtractor {
    @Override
    public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
      return number((String) record.value(), "\"ts\":");
    }
  }

  /** The integer after {@code name}. */
  static long number(String json, String name) {
    return digits(json, name, false);
  }

  /** The number after {@code name} in hundredths: the workload prints amounts with two decimals ("12.34"). */
  static long cents(String json, String name) {
    return digits(json, name, true);
  }

  private static long digits(String json, String name, boolean skipPoint) {
    int i = json.indexOf(name) + name.length();
    long v = 0;
    boolean negative = json.charAt(i) == '-';
    if (negative) {
      i++;
    }
    for (; i < json.length(); i++) {
      char c = json.charAt(i);
      if (skipPoint && c == '.') {
        continue;
      }
      if (c < '0' || c > '9') {
        break;
      }
      v = v * 10 + (c - '0');
    }
    return negative ? -v : v;
  }

  /** count and sum as 16 bytes. */
  static final class CountSumSerde implements Serde<long[]> {
    @Override
    public Serializer<long[]> serializer() {
      return (topic, a) -> a == null ? null : ByteBuffer.allocate(16).putLong(a[0]).putLong(a[1]).array();
    }

    @Override
    public Deserializer<long[]> deserializer() {
      return (topic, b) -> {
        if (b == null) {
          return null;
        }
        ByteBuffer buf = ByteBuffer.wrap(b);
        return new long[] {buf.getLong(), buf.getLong()};
      };
    }
  }
}
