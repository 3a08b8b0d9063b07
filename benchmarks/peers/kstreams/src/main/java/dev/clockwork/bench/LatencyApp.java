package dev.clockwork.bench;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * The latency benchmark's pipeline in Kafka Streams (benchmarks/latency.py, issue #51):
 * JSON {"user","ts","amount"} keyed by user, event time from "ts", tumbling 1 s windows
 * with 200 ms grace, count and sum per user, one result per window when it closes
 * (suppress untilWindowCloses), written as JSON {"window": {"start","end"}, "key",
 * "result": {"n","total"}}. Or (pipeline "stateless") the records with amount &lt; 6,
 * each written at once as JSON {"key", "value"}.
 *
 * <p>Arguments: bootstrap input-topic output-topic application-id state-dir
 * default|low-latency window|stateless [expected-records]. With expected-records, it prints one JSON line
 * {"running_ms", "first_ms", "last_ms", "records"} to stdout once that many input records
 * were aggregated (the maximum-rate measurement), and keeps running until killed. It
 * prints "RUNNING" to stdout when the instance first reaches state RUNNING.
 */
public final class LatencyApp {
  static final long WINDOW_MS = 1_000;
  static final long GRACE_MS = 200;

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String input = args[1];
    String output = args[2];
    String appId = args[3];
    String stateDir = args[4];
    boolean lowLatency = args[5].equals("low-latency");
    boolean stateless = args[6].equals("stateless");
    long expected = args.length > 7 ? Long.parseLong(args[7]) : -1;

    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
    props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    props.put("consumer.auto.offset.reset", "earliest");
    if (lowLatency) {
      // The record caches hold a KTable's updates until a commit or an eviction: with no
      // cache, every update goes downstream (to suppress) at once (docs: Memory
      // management, "Record caches in the DSL"). commit.interval.ms also flushes the
      // producer; 0 would commit after every poll, a broker round trip each time.
      props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0L);
      props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 10);
      // Kafka Streams raises the producer's linger.ms to 100 ms (its throughput
      // default); a latency-sensitive app sets it back (docs: Configuring a Streams
      // application, "Default Values").
      props.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 0);
    }

    AtomicLong seen = new AtomicLong();
    AtomicLong first = new AtomicLong();
    Serde<long[]> aggSerde = new Records.CountSumSerde();
    StreamsBuilder builder = new StreamsBuilder();
    KStream<String, String> in = builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()).withTimestampExtractor(new Records.TsExtractor()))
        .peek((k, v) -> {
          if (expected > 0) {
            long n = seen.incrementAndGet();
            if (n == 1) {
              first.set(System.currentTimeMillis());
            }
            if (n == expected) {
              // after this record's aggregation (the next one's peek would be later)
              System.out.printf("{\"first_ms\": %d, \"last_ms\": %d, \"records\": %d}%n",
                  first.get(), System.currentTimeMillis(), n);
              System.out.flush();
            }
          }
        });
    if (stateless) {
      in.filter((k, v) -> Records.number(v, "\"amount\":") < 6)
          .mapValues((k, v) -> "{\"key\":\"" + k + "\",\"value\":" + v + "}")
          .to(output, Produced.with(Serdes.String(), Serdes.String()));
    } else {
      in.groupByKey()
          .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(WINDOW_MS), Duration.ofMillis(GRACE_MS)))
          .aggregate(
              () -> new long[] {0, 0},
              (k, v, agg) -> new long[] {agg[0] + 1, agg[1] + Records.number(v, "\"amount\":")},
              Materialized.with(Serdes.String(), aggSerde))
          .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
          .toStream()
          .map((w, agg) -> KeyValue.pair(w.key(), String.format(
              "{\"window\":{\"start\":%d,\"end\":%d},\"key\":\"%s\",\"result\":{\"n\":%d,\"total\":%d}}",
              w.window().start(), w.window().end(), w.key(), agg[0], agg[1])))
          .to(output, Produced.with(Serdes.String(), Serdes.String()));
    }

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    CountDownLatch done = new CountDownLatch(1);
    streams.setStateListener((now, before) -> {
      if (now == KafkaStreams.State.RUNNING && before != KafkaStreams.State.RUNNING) {
        System.out.printf("{\"running_ms\": %d}%n", System.currentTimeMillis());
        System.out.flush();
      }
      if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
        done.countDown();
      }
    });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      streams.close(Duration.ofSeconds(10));
      done.countDown();
    }));
    streams.start();
    done.await();
  }
}
