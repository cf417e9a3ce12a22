package spindle.javatest;

import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.errors.UnsupportedVersionException;

/** The AdminClient: topics, the cluster, offsets, settings, groups, deleting records. */
final class AdminScenarios {
    private static final long DEADLINE_MS = 30_000;

    private AdminScenarios() {}

    private static <T> T get(KafkaFuture<T> future) throws Exception {
        return future.get(Env.ADMIN_TIMEOUT_S, TimeUnit.SECONDS);
    }

    /** Create (with settings, validate-only, twice), list, describe, add partitions, delete. */
    static void topics(Env env) throws Exception {
        String withConfigs = env.name("configs");
        String plain = env.name("plain");
        String validateOnly = env.name("validate-only");
        try (Admin admin = env.admin()) {
            get(admin.createTopics(List.of(
                    new NewTopic(withConfigs, 3, (short) 1)
                            .configs(Map.of("retention.ms", "3600000", "max.message.bytes", "200000")),
                    new NewTopic(plain, 1, (short) 1))).all());
            Check.fails(TopicExistsException.class, "creating " + plain + " again",
                    () -> get(admin.createTopics(List.of(new NewTopic(plain, 1, (short) 1))).all()));
            get(admin.createTopics(List.of(new NewTopic(validateOnly, 2, (short) 1)),
                    new CreateTopicsOptions().validateOnly(true)).all());

            Set<String> listed = get(admin.listTopics().names());
            Check.that(listed.containsAll(List.of(withConfigs, plain)), "listTopics names both topics: " + listed);
            Check.that(!listed.contains(validateOnly), "a validate-only creation made no topic");

            TopicDescription described = get(admin.describeTopics(List.of(withConfigs)).allTopicNames()).get(withConfigs);
            Check.equal(3, described.partitions().size(), "partitions described");
            Check.that(!described.topicId().equals(org.apache.kafka.common.Uuid.ZERO_UUID), "topic id set");
            for (var p : described.partitions()) {
                Check.that(p.leader() != null && !p.leader().isEmpty(), "partition " + p.partition() + " has a leader");
                Check.equal(List.of(p.leader()), p.replicas(), "replicas of partition " + p.partition());
                Check.equal(List.of(p.leader()), p.isr(), "ISR of partition " + p.partition());
            }

            Config config = topicConfig(admin, withConfigs);
            Check.equal("3600000", config.get("retention.ms").value(), "retention.ms");
            Check.equal(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, config.get("retention.ms").source(),
                    "retention.ms source");
            Check.equal("200000", config.get("max.message.bytes").value(), "max.message.bytes");
            Check.equal("delete", config.get("cleanup.policy").value(), "default cleanup.policy");
            Check.that(!config.get("cleanup.policy").source().equals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG),
                    "cleanup.policy is not a topic setting: " + config.get("cleanup.policy").source());

            get(admin.createPartitions(Map.of(withConfigs, NewPartitions.increaseTo(5))).all());
            waitFor("5 partitions described", () -> get(admin.describeTopics(List.of(withConfigs)).allTopicNames())
                    .get(withConfigs).partitions().size() == 5);

            get(admin.deleteTopics(List.of(withConfigs, plain)).all());
            waitFor("deleted topics gone from listTopics", () -> {
                Set<String> names = get(admin.listTopics().names());
                return !names.contains(withConfigs) && !names.contains(plain);
            });
            Check.fails(UnknownTopicOrPartitionException.class, "deleting a deleted topic",
                    () -> get(admin.deleteTopics(List.of(plain)).all()));
        }
    }

    /** describeCluster, and listOffsets by every spec. */
    static void clusterAndOffsets(Env env) throws Exception {
        String topic = env.name("topic");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = env.admin()) {
            DescribeClusterResult cluster = admin.describeCluster();
            Collection<Node> nodes = get(cluster.nodes());
            Node controller = get(cluster.controller());
            String clusterId = get(cluster.clusterId());
            Check.equal(1, nodes.size(), "nodes in the cluster");
            Node node = nodes.iterator().next();
            Check.equal(Integer.parseInt(env.bootstrap().split(":")[1]), node.port(), "the node's port");
            Check.that(controller != null && !controller.isEmpty(), "a controller: " + controller);
            Check.that(clusterId != null && !clusterId.isEmpty(), "a cluster id");

            env.createTopic(admin, topic, 1, Map.of());
            long base = System.currentTimeMillis() - 600_000;
            try (KafkaProducer<String, String> producer = env.producer(Map.of())) {
                // Timestamps base, base+1, ... base+9; the largest one is the last record's.
                Env.produce(producer, topic, 1, 10, base);
            }
            Check.equal(0L, offset(admin, tp, OffsetSpec.earliest()).offset(), "earliest offset");
            Check.equal(10L, offset(admin, tp, OffsetSpec.latest()).offset(), "latest offset");
            ListOffsetsResultInfo byTime = offset(admin, tp, OffsetSpec.forTimestamp(base + 4));
            Check.equal(4L, byTime.offset(), "offset for timestamp base+4");
            Check.equal(base + 4, byTime.timestamp(), "timestamp of the offset for base+4");
            Check.equal(-1L, offset(admin, tp, OffsetSpec.forTimestamp(base + 60_000)).offset(),
                    "offset for a timestamp after the last record");
            ListOffsetsResultInfo max = offset(admin, tp, OffsetSpec.maxTimestamp());
            Check.equal(9L, max.offset(), "offset of the largest timestamp");
            Check.equal(base + 9, max.timestamp(), "largest timestamp");
            get(admin.deleteTopics(List.of(topic)).all());
        }
    }

    /** describeConfigs of a topic and of the broker; incrementalAlterConfigs set, delete, refuse. */
    static void configs(Env env) throws Exception {
        String topic = env.name("topic");
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        try (Admin admin = env.admin()) {
            env.createTopic(admin, topic, 1, Map.of("retention.ms", "86400000", "max.message.bytes", "300000"));
            String defaultMaxMessageBytes = brokerConfig(admin).get("message.max.bytes").value();

            get(admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("retention.bytes", "1048576"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("max.message.bytes", ""), AlterConfigOp.OpType.DELETE)))).all());
            Config config = topicConfig(admin, topic);
            Check.equal("7200000", config.get("retention.ms").value(), "retention.ms after SET");
            Check.equal("1048576", config.get("retention.bytes").value(), "retention.bytes after SET");
            Check.equal(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, config.get("retention.bytes").source(),
                    "retention.bytes source");
            Check.equal(defaultMaxMessageBytes, config.get("max.message.bytes").value(),
                    "max.message.bytes after DELETE is the broker's message.max.bytes");
            Check.that(!config.get("max.message.bytes").source().equals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG),
                    "max.message.bytes is no longer a topic setting");

            Check.fails(InvalidConfigurationException.class, "retention.ms=soon", () -> get(admin.incrementalAlterConfigs(
                    Map.of(resource, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "soon"),
                            AlterConfigOp.OpType.SET)))).all()));
            Check.equal("7200000", topicConfig(admin, topic).get("retention.ms").value(),
                    "retention.ms after a refused change");

            Config broker = brokerConfig(admin);
            Check.that(Integer.parseInt(broker.get("num.partitions").value()) >= 1, "the broker's num.partitions");
            get(admin.deleteTopics(List.of(topic)).all());
        }
    }

    /** A group with a member and commits: listed, described, its offsets, deleted once empty. */
    static void groups(Env env) throws Exception {
        String topic = env.name("topic");
        String group = env.name("group");
        try (Admin admin = env.admin()) {
            env.createTopic(admin, topic, 2, Map.of());
            try (KafkaProducer<String, String> producer = env.producer(Map.of())) {
                Env.produce(producer, topic, 2, 20, System.currentTimeMillis());
            }
            try (var consumer = env.consumer(Map.of(ConsumerConfig.GROUP_ID_CONFIG, group,
                    ConsumerConfig.CLIENT_ID_CONFIG, "java-admin-groups"))) {
                consumer.subscribe(List.of(topic));
                Env.read(consumer, 20);
                consumer.commitSync();

                GroupListing listed = listGroups(admin).get(group);
                Check.that(listed != null, "listGroups names " + group);
                Check.equal(java.util.Optional.of(GroupState.STABLE), listed.groupState(), "listed state");

                ConsumerGroupDescription described = get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
                Check.equal(GroupState.STABLE, described.groupState(), "described state");
                Check.equal("range", described.partitionAssignor(), "assignor (the client's first default)");
                Check.equal(1, described.members().size(), "members");
                var member = described.members().iterator().next();
                Check.equal("java-admin-groups", member.clientId(), "member's client id");
                Check.equal(Set.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1)),
                        member.assignment().topicPartitions(), "member's assignment");

                Check.fails(GroupNotEmptyException.class, "deleting a group with a member",
                        () -> get(admin.deleteConsumerGroups(List.of(group)).all()));
            }

            Map<TopicPartition, OffsetAndMetadata> offsets = get(admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata());
            Check.equal(Map.of(new TopicPartition(topic, 0), 10L, new TopicPartition(topic, 1), 10L),
                    offsets.entrySet().stream().collect(Collectors.toMap(Map.Entry::getKey, e -> e.getValue().offset())),
                    "listConsumerGroupOffsets");
            Check.equal(GroupState.EMPTY, get(admin.describeConsumerGroups(List.of(group)).all()).get(group)
                    .groupState(), "state after the member left");

            get(admin.deleteConsumerGroups(List.of(group)).all());
            Check.that(!listGroups(admin).containsKey(group), "a deleted group is not listed");
            get(admin.deleteTopics(List.of(topic)).all());
        }
    }

    /**
     * deleteRecords moves the log start offset where the broker implements DeleteRecords; where
     * it does not, the client must fail with UnsupportedVersionException and the records stay.
     * Prints which of the two happened; the pytest side checks it against the broker's ApiVersions.
     */
    static void deleteRecords(Env env) throws Exception {
        String topic = env.name("topic");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = env.admin()) {
            env.createTopic(admin, topic, 1, Map.of());
            List<Env.Rec> sent;
            try (KafkaProducer<String, String> producer = env.producer(Map.of())) {
                sent = Env.produce(producer, topic, 1, 10, System.currentTimeMillis());
            }
            long expectedStart;
            try {
                var result = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4))).lowWatermarks().get(tp);
                Check.equal(4L, get(result).lowWatermark(), "low watermark after deleteRecords(before 4)");
                expectedStart = 4;
                System.out.println("DELETE_RECORDS deleted");
            } catch (java.util.concurrent.ExecutionException e) {
                if (!(e.getCause() instanceof UnsupportedVersionException)) {
                    throw e;
                }
                Check.that(e.getCause().getMessage().contains("DELETE_RECORDS"),
                        "the error names the API: " + e.getCause().getMessage());
                expectedStart = 0;
                System.out.println("DELETE_RECORDS unsupported: " + e.getCause().getMessage());
            }
            Check.equal(expectedStart, offset(admin, tp, OffsetSpec.earliest()).offset(), "earliest offset");
            try (var consumer = env.consumer(Map.of())) {
                consumer.assign(List.of(tp));
                consumer.seekToBeginning(List.of(tp));
                Check.equal(sent.subList((int) expectedStart, 10), Env.read(consumer, 10 - (int) expectedStart),
                        "records from the start");
            }
            get(admin.deleteTopics(List.of(topic)).all());
        }
    }

    private static Config topicConfig(Admin admin, String topic) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        return get(admin.describeConfigs(List.of(resource)).all()).get(resource);
    }

    private static Config brokerConfig(Admin admin) throws Exception {
        Node node = get(admin.describeCluster().nodes()).iterator().next();
        ConfigResource resource = new ConfigResource(ConfigResource.Type.BROKER, node.idString());
        Config config = get(admin.describeConfigs(List.of(resource)).all()).get(resource);
        Check.equal(node.idString(), config.get("broker.id") == null ? null : config.get("broker.id").value(),
                "broker.id in the broker's settings");
        return config;
    }

    private static ListOffsetsResultInfo offset(Admin admin, TopicPartition tp, OffsetSpec spec) throws Exception {
        return get(admin.listOffsets(Map.of(tp, spec)).partitionResult(tp));
    }

    private static Map<String, GroupListing> listGroups(Admin admin) throws Exception {
        return get(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all()).stream()
                .collect(Collectors.toMap(GroupListing::groupId, g -> g));
    }

    interface Condition {
        boolean holds() throws Exception;
    }

    private static void waitFor(String what, Condition condition) throws Exception {
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        while (!condition.holds()) {
            Check.that(System.currentTimeMillis() < deadline, what + " within " + DEADLINE_MS + " ms");
            Thread.sleep(100);
        }
    }
}
