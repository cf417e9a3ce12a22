package spindle.javatest;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/** What every scenario is given (the broker, a prefix for its names), and the helpers they share. */
record Env(String bootstrap, String prefix, String arg) {
    static final Duration READ_TIMEOUT = Duration.ofSeconds(60);
    static final long ADMIN_TIMEOUT_S = 30;

    /** A topic or group name no other test uses. */
    String name(String kind) {
        return prefix + "-" + kind;
    }

    Admin admin() {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        return Admin.create(p);
    }

    /** A producer with the client's defaults except for {@code overrides}. */
    KafkaProducer<String, String> producer(Map<String, Object> overrides) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.putAll(overrides);
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    KafkaConsumer<String, String> consumer(Map<String, Object> overrides) {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.putAll(overrides);
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    void createTopic(Admin admin, String topic, int partitions, Map<String, String> configs) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1).configs(configs)))
                .all()
                .get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
    }

    void createTopic(String topic, int partitions) throws Exception {
        try (Admin admin = admin()) {
            createTopic(admin, topic, partitions, Map.of());
        }
    }

    /** A record as the test sees it: what was sent, with where the broker put it. */
    record Rec(int partition, long offset, String key, String value, long timestamp, List<String> headers) {
        static Rec of(ConsumerRecord<String, String> r) {
            List<String> headers = new ArrayList<>();
            for (Header h : r.headers()) {
                headers.add(h.key() + "=" + new String(h.value(), StandardCharsets.UTF_8));
            }
            return new Rec(r.partition(), r.offset(), r.key(), r.value(), r.timestamp(), headers);
        }
    }

    /**
     * Sends {@code count} records, keys k0..k(n-1) spread over {@code partitions} partitions by
     * the test (not the partitioner), each with a header and a timestamp of {@code baseTimestamp + i};
     * waits for every acknowledgement and returns the records with their offsets.
     */
    static List<Rec> produce(KafkaProducer<String, String> producer, String topic, int partitions, int count,
            long baseTimestamp) throws Exception {
        List<java.util.concurrent.Future<RecordMetadata>> acks = new ArrayList<>();
        List<ProducerRecord<String, String>> sent = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            var record = new ProducerRecord<>(topic, i % partitions, baseTimestamp + i, "k" + i, "value-" + i + "-"
                    + "x".repeat(i % 97), List.<Header>of(new RecordHeader("h", ("v" + i).getBytes(StandardCharsets.UTF_8))));
            sent.add(record);
            acks.add(producer.send(record));
        }
        producer.flush();
        List<Rec> out = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            RecordMetadata md = acks.get(i).get(ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
            var r = sent.get(i);
            Check.equal(r.partition(), md.partition(), "partition of record " + i);
            Check.equal(r.timestamp(), md.timestamp(), "timestamp acknowledged for record " + i);
            out.add(new Rec(md.partition(), md.offset(), r.key(), r.value(), r.timestamp(), List.of("h=v" + i)));
        }
        return out;
    }

    /** Polls until {@code count} records arrived, failing on more or on the deadline. */
    static List<Rec> read(KafkaConsumer<String, String> consumer, int count) {
        List<Rec> got = readAtLeast(consumer, count);
        Check.equal(count, got.size(), "records read");
        return got;
    }

    /** The first {@code count} records the consumer returns (polls may bring more). */
    static List<Rec> readFirst(KafkaConsumer<String, String> consumer, int count) {
        return readAtLeast(consumer, count).subList(0, count);
    }

    private static List<Rec> readAtLeast(KafkaConsumer<String, String> consumer, int count) {
        List<Rec> got = new ArrayList<>();
        long deadline = System.nanoTime() + READ_TIMEOUT.toNanos();
        while (got.size() < count) {
            Check.that(System.nanoTime() < deadline, "read " + got.size() + " of " + count + " records in "
                    + READ_TIMEOUT);
            for (var r : consumer.poll(Duration.ofMillis(200))) {
                got.add(Rec.of(r));
            }
        }
        return got;
    }

    /**
     * Checks that {@code got} holds exactly the records {@code sent}, each partition's in the
     * order they were sent (the order between partitions is not defined).
     */
    static void sameRecords(List<Rec> sent, List<Rec> got) {
        Check.equal(sent.size(), got.size(), "number of records read back");
        Check.equal(byPartition(sent), byPartition(got), "records read back, by partition");
    }

    private static Map<Integer, List<Rec>> byPartition(List<Rec> records) {
        Map<Integer, List<Rec>> out = new TreeMap<>();
        for (Rec r : records) {
            out.computeIfAbsent(r.partition(), p -> new ArrayList<>()).add(r);
        }
        return out;
    }
}
