package spindle.javatest;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringSerializer;

/** The producer: its defaults (idempotent, acks=all, no transactions), and each codec. */
final class ProducerScenarios {
    private static final int PARTITIONS = 3;

    private ProducerScenarios() {}

    static void defaults(Env env) throws Exception {
        // The scenario is about the client's defaults: make sure they are what it claims.
        Properties bare = new Properties();
        bare.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, env.bootstrap());
        bare.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        bare.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        ProducerConfig resolved = new ProducerConfig(bare);
        Check.equal(true, resolved.getBoolean(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG), "default enable.idempotence");
        Check.that(List.of("all", "-1").contains(resolved.getString(ProducerConfig.ACKS_CONFIG)),
                "default acks is all, got " + resolved.getString(ProducerConfig.ACKS_CONFIG));
        Check.equal(null, resolved.getString(ProducerConfig.TRANSACTIONAL_ID_CONFIG), "default transactional.id");

        roundTrip(env, env.name("defaults"), Map.of(), 3000);
    }

    static void codec(Env env) throws Exception {
        String codec = env.arg();
        Check.that(List.of("gzip", "snappy", "lz4", "zstd").contains(codec), "codec argument, got " + codec);
        // linger.ms gathers records into batches worth compressing.
        double ratio = roundTrip(env, env.name(codec),
                Map.of(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec, ProducerConfig.LINGER_MS_CONFIG, 20), 2000);
        Check.that(ratio > 0 && ratio < 0.5, codec + " batches compressed (compression-rate-avg " + ratio + ")");
    }

    /**
     * Produces {@code count} records over {@link #PARTITIONS} partitions, checks that each
     * partition's offsets are dense from 0, reads them all back with a consumer and compares;
     * returns the producer's compression-rate-avg.
     */
    private static double roundTrip(Env env, String topic, Map<String, Object> config, int count) throws Exception {
        env.createTopic(topic, PARTITIONS);
        List<Env.Rec> sent;
        double compressionRate;
        try (KafkaProducer<String, String> producer = env.producer(new HashMap<>(config))) {
            sent = Env.produce(producer, topic, PARTITIONS, count, System.currentTimeMillis() - 60_000);
            compressionRate = metric(producer.metrics(), "compression-rate-avg");
        }
        long[] next = new long[PARTITIONS];
        for (Env.Rec r : sent) {
            Check.equal(next[r.partition()], r.offset(), "offset acknowledged for " + r.key());
            next[r.partition()]++;
        }

        try (KafkaConsumer<String, String> consumer = env.consumer(Map.of())) {
            List<TopicPartition> tps = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1),
                    new TopicPartition(topic, 2));
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Env.sameRecords(sent, Env.read(consumer, count));
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
            for (TopicPartition tp : tps) {
                Check.equal(next[tp.partition()], ends.get(tp), "end offset of " + tp);
            }
        }
        return compressionRate;
    }

    private static double metric(Map<MetricName, ? extends Metric> metrics, String name) {
        for (var e : metrics.entrySet()) {
            if (e.getKey().name().equals(name) && e.getKey().group().equals("producer-metrics")) {
                return ((Number) e.getValue().metricValue()).doubleValue();
            }
        }
        throw new AssertionError("producer has no metric " + name);
    }
}
