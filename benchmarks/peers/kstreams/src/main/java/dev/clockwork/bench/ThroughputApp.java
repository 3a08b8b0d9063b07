package dev.clockwork.bench;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * The peers' throughput table's task (benchmarks/peers, W1) in Kafka Streams: JSON
 * {"user","ts","amount"} keyed by user, event time from "ts", tumbling 60 s windows with
 * 2 s grace, count and sum per user, one result per window when it closes
 * (suppress untilWindowCloses), written as {"user","start","end","count","sum"}.
 * Every Streams setting its default (one stream thread, the 10 MB record cache, commit
 * every 30 s), but the group consumer's timeouts and fetch wait that every peer gets
 * against the embedded broker (benchmarks/peers/_common.py).
 *
 * <p>Arguments: bootstrap input output application-id state-dir records report-path. Once
 * {@code records} input records (end markers included) went through, the instance is
 * closed: a close commits, which flushes the cache into suppress and the producer, so
 * every closed window is out. Then it writes the report (the peers' Report JSON:
 * started, first_record, finished, records_in) and exits.
 */
public final class ThroughputApp {
  static final long WINDOW_MS = 60_000;
  static final long GRACE_MS = 2_000;

  public static void main(String[] args) throws Exception {
    String bootstrap = args[0];
    String input = args[1];
    String output = args[2];
    String appId = args[3];
    String stateDir = args[4];
    long expected = Long.parseLong(args[5]);
    Path report = Path.of(args[6]);
    double started = ManagementFactory.getRuntimeMXBean().getStartTime() / 1000.0;

    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
    props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    // What every group consumer of the table gets against the embedded broker
    // (benchmarks/peers/_common.py): it answers a waiting fetch only when the wait
    // expires, and a join after half the session timeout.
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG), 20);
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 2000);
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 500);

    AtomicLong seen = new AtomicLong();
    AtomicLong first = new AtomicLong();
    CountDownLatch all = new CountDownLatch(1);
    Serde<long[]> aggSerde = new Records.CountSumSerde();
    StreamsBuilder builder = new StreamsBuilder();
    builder.stream(input, Consumed.with(Serdes.String(), Serdes.String()).withTimestampExtractor(new Records.TsExtractor()))
        .peek((k, v) -> {
          long n = seen.incrementAndGet();
          if (n == 1) {
            first.set(System.currentTimeMillis());
          }
          if (n == expected) {
            all.countDown();
          }
        })
        .groupByKey()
        .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMillis(WINDOW_MS), Duration.ofMillis(GRACE_MS)))
        .aggregate(
            () -> new long[] {0, 0},
            (k, v, agg) -> new long[] {agg[0] + 1, agg[1] + Records.cents(v, "\"amount\":")},
            Materialized.with(Serdes.String(), aggSerde))
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .map((w, agg) -> KeyValue.pair(w.key(), String.format(
            "{\"user\":\"%s\",\"start\":%d,\"end\":%d,\"count\":%d,\"sum\":%d.%02d}",
            w.key(), w.window().start(), w.window().end(), agg[0], agg[1] / 100, agg[1] % 100)))
        .to(output, Produced.with(Serdes.String(), Serdes.String()));

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    CountDownLatch failed = new CountDownLatch(1);
    streams.setStateListener((now, before) -> {
      if (now == KafkaStreams.State.ERROR) {
        failed.countDown();
        all.countDown();
      }
    });
    streams.start();
    all.await();
    streams.close(Duration.ofSeconds(60));
    double finished = System.currentTimeMillis() / 1000.0;
    if (failed.getCount() == 0) {
      System.err.println("the Streams instance went to ERROR");
      System.exit(1);
    }
    String version = org.apache.kafka.streams.internals.metrics.ClientMetrics.version();
    String json = String.format(
        "{\"tool\": \"Kafka Streams\", \"version\": \"%s\", \"started\": %.3f, \"first_record\": %.3f,"
            + " \"finished\": %.3f, \"records_in\": %d, \"rows_out\": 0, \"notes\": []}",
        version == null ? "?" : version, started, first.get() / 1000.0, finished, seen.get());
    try {
      Files.writeString(report, json, StandardCharsets.UTF_8);
    } catch (IOException e) {
      System.err.println("cannot write the report: " + e);
      System.exit(1);
    }
    System.exit(0);
  }
}
