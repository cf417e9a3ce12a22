package spindle.javatest;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.TopicPartition;

/** The consumer: groups with each default assignor, manual assignment, seeks, commits, restarts. */
final class ConsumerScenarios {
    private static final Duration POLL = Duration.ofMillis(100);
    private static final long REBALANCE_TIMEOUT_MS = 60_000;

    private ConsumerScenarios() {}

    /** What a rebalance listener saw: every partition it was given and every one taken away. */
    private static final class Seen implements ConsumerRebalanceListener {
        final List<Integer> revoked = new ArrayList<>();

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            partitions.forEach(tp -> revoked.add(tp.partition()));
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {}
    }

    /**
     * Two members of one group with the assignor given as the argument (range or
     * cooperative-sticky, the Java client's default list): they split the partitions, the
     * second member's arrival takes from the first only what moves (cooperative) or everything
     * (eager), each reads exactly its partitions' records, and the commits are what they read.
     */
    static void groupAssignor(Env env) throws Exception {
        String assignor = env.arg();
        Class<?> assignorClass = switch (assignor) {
            case "range" -> RangeAssignor.class;
            case "cooperative-sticky" -> CooperativeStickyAssignor.class;
            default -> throw new AssertionError("assignor argument: range or cooperative-sticky, got " + assignor);
        };
        String topic = env.name("topic");
        String group = env.name("group");
        int partitions = 4;
        env.createTopic(topic, partitions);
        Map<String, Object> config = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignorClass.getName());

        try (var first = env.consumer(config); var second = env.consumer(config); Admin admin = env.admin()) {
            Seen firstSeen = new Seen();
            first.subscribe(List.of(topic), firstSeen);
            pollUntil(List.of(first), () -> first.assignment().size() == partitions, "first member owns all 4");
            Check.equal(List.of(), firstSeen.revoked, "partitions revoked before the second member joined");

            second.subscribe(List.of(topic), new Seen());
            pollUntil(List.of(first, second),
                    () -> first.assignment().size() == 2 && second.assignment().size() == 2,
                    "two members own 2 partitions each");
            Set<Integer> firstOwns = partitionsOf(first.assignment());
            Set<Integer> secondOwns = partitionsOf(second.assignment());
            Set<Integer> all = new TreeSet<>(firstOwns);
            all.addAll(secondOwns);
            Check.equal(Set.of(0, 1, 2, 3), all, "the members' partitions together");
            if (assignor.equals("range")) {
                // Range hands each member a contiguous run; eager rebalancing revokes everything.
                Check.that(Set.of(Set.of(0, 1), Set.of(2, 3)).contains(firstOwns), "range assignment " + firstOwns);
                Check.equal(Set.of(0, 1, 2, 3), new TreeSet<>(firstSeen.revoked), "eager rebalance revoked");
            } else {
                // Cooperative: the first member gives up exactly the two partitions that move.
                Check.equal(secondOwns, new TreeSet<>(firstSeen.revoked), "cooperative rebalance revoked");
            }

            ConsumerGroupDescription described = admin.describeConsumerGroups(List.of(group)).all()
                    .get(Env.ADMIN_TIMEOUT_S, TimeUnit.SECONDS).get(group);
            Check.equal(assignor, described.partitionAssignor(), "the group's assignor");
            Check.equal(2, described.members().size(), "members described");

            List<Env.Rec> sent;
            try (KafkaProducer<String, String> producer = env.producer(Map.of())) {
                sent = Env.produce(producer, topic, partitions, 400, System.currentTimeMillis());
            }
            List<Env.Rec> firstGot = new ArrayList<>();
            List<Env.Rec> secondGot = new ArrayList<>();
            long deadline = System.currentTimeMillis() + Env.READ_TIMEOUT.toMillis();
            while (firstGot.size() + secondGot.size() < sent.size()) {
                Check.that(System.currentTimeMillis() < deadline, "the members read all records in time");
                first.poll(POLL).forEach(r -> firstGot.add(Env.Rec.of(r)));
                second.poll(POLL).forEach(r -> secondGot.add(Env.Rec.of(r)));
            }
            Check.that(firstGot.stream().allMatch(r -> firstOwns.contains(r.partition())), "first read only its own");
            Check.that(secondGot.stream().allMatch(r -> secondOwns.contains(r.partition())), "second read only its own");
            List<Env.Rec> got = new ArrayList<>(firstGot);
            got.addAll(secondGot);
            Env.sameRecords(sent, got);
            first.commitSync();
            second.commitSync();

            Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(Env.ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
            for (int p = 0; p < partitions; p++) {
                Check.equal(100L, committed.get(new TopicPartition(topic, p)).offset(), "committed offset of " + p);
            }
        }
    }

    /**
     * Manual assignment: seek, offsetsForTimes, beginning and end offsets, commitSync of an
     * explicit offset, and a new consumer of the same group that starts at that commit.
     */
    static void manualAssignment(Env env) throws Exception {
        String topic = env.name("topic");
        String group = env.name("group");
        env.createTopic(topic, 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        long base = System.currentTimeMillis() - 3_600_000;
        List<Env.Rec> sent;
        try (KafkaProducer<String, String> producer = env.producer(Map.of())) {
            sent = Env.produce(producer, topic, 1, 200, base);
        }

        Map<String, Object> config = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group);
        try (var consumer = env.consumer(config)) {
            consumer.assign(List.of(tp));
            Check.equal(Map.of(tp, 0L), consumer.beginningOffsets(List.of(tp)), "beginning offsets");
            Check.equal(Map.of(tp, 200L), consumer.endOffsets(List.of(tp)), "end offsets");

            consumer.seek(tp, 50);
            Check.equal(sent.subList(50, 60), Env.readFirst(consumer, 10), "records after seek(50)");

            Map<TopicPartition, OffsetAndTimestamp> byTime = consumer.offsetsForTimes(Map.of(tp, base + 120));
            Check.equal(120L, byTime.get(tp).offset(), "offsetsForTimes(base + 120)");
            Check.equal(base + 120, byTime.get(tp).timestamp(), "the timestamp offsetsForTimes(base + 120) found");
            Check.equal(null, consumer.offsetsForTimes(Map.of(tp, base + 1_000)).get(tp),
                    "offsetsForTimes after the last record");

            consumer.seekToEnd(List.of(tp));
            Check.equal(200L, consumer.position(tp), "position after seekToEnd");

            consumer.commitSync(Map.of(tp, new OffsetAndMetadata(77, "java-manual")));
            OffsetAndMetadata committed = consumer.committed(Set.of(tp)).get(tp);
            Check.equal(77L, committed.offset(), "committed offset");
            Check.equal("java-manual", committed.metadata(), "committed metadata");
        }

        // The restart: no seek, so the position comes from the group's commit.
        try (var consumer = env.consumer(config)) {
            consumer.assign(List.of(tp));
            Check.equal(77L, consumer.position(tp), "position of a new consumer of the group");
            Check.equal(sent.get(77), Env.readFirst(consumer, 1).get(0), "first record after the restart");
        }
    }

    /**
     * A subscribed member reads part of the records and commits (commitSync of its positions);
     * after it closes, a new member of the group reads exactly the rest: nothing twice, nothing lost.
     */
    static void commitAndRestart(Env env) throws Exception {
        String topic = env.name("topic");
        String group = env.name("group");
        int partitions = 2;
        env.createTopic(topic, partitions);
        List<Env.Rec> sent;
        try (KafkaProducer<String, String> producer = env.producer(Map.of())) {
            sent = Env.produce(producer, topic, partitions, 400, System.currentTimeMillis());
        }
        Map<String, Object> config = Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 25);
        List<Env.Rec> before = new ArrayList<>();
        Map<Integer, Long> positions = new HashMap<>();
        try (var consumer = env.consumer(config)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + Env.READ_TIMEOUT.toMillis();
            while (before.size() < 100) {
                Check.that(System.currentTimeMillis() < deadline, "read 100 records in time, got " + before.size());
                consumer.poll(POLL).forEach(r -> before.add(Env.Rec.of(r)));
            }
            consumer.commitSync();
            for (TopicPartition tp : consumer.assignment()) {
                positions.put(tp.partition(), consumer.position(tp));
            }
        }
        Check.equal(Set.of(0, 1), positions.keySet(), "partitions the first member owned");
        try (Admin admin = env.admin()) {
            Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(Env.ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
            for (var e : positions.entrySet()) {
                Check.equal(e.getValue(), committed.get(new TopicPartition(topic, e.getKey())).offset(),
                        "committed offset of partition " + e.getKey());
            }
        }

        int rest = sent.size() - before.size();
        try (var consumer = env.consumer(config)) {
            consumer.subscribe(List.of(topic));
            List<Env.Rec> after = Env.read(consumer, rest);
            for (int p = 0; p < partitions; p++) {
                final int partition = p;
                after.stream().filter(r -> r.partition() == partition).findFirst().ifPresent(first ->
                        Check.equal(positions.get(partition), first.offset(), "first offset read after the restart"));
            }
            List<Env.Rec> all = new ArrayList<>(before);
            all.addAll(after);
            Env.sameRecords(sent, all);
            Check.equal(0, consumer.poll(Duration.ofMillis(500)).count(), "records beyond the end");
        }
    }

    private static Set<Integer> partitionsOf(Set<TopicPartition> tps) {
        Set<Integer> out = new TreeSet<>();
        tps.forEach(tp -> out.add(tp.partition()));
        return out;
    }

    private static void pollUntil(List<KafkaConsumer<String, String>> consumers, java.util.function.BooleanSupplier done,
            String what) {
        long deadline = System.currentTimeMillis() + REBALANCE_TIMEOUT_MS;
        while (!done.getAsBoolean()) {
            Check.that(System.currentTimeMillis() < deadline, what + " within " + REBALANCE_TIMEOUT_MS + " ms");
            for (var c : consumers) {
                Check.equal(0, c.poll(POLL).count(), "records on an empty topic");
            }
        }
    }
}
