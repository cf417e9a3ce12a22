package spindle.javatest;

import java.util.Map;
import java.util.TreeMap;

/**
 * Runs one scenario of the Java client tests against a broker:
 * {@code java -cp ... spindle.javatest.Main SCENARIO BOOTSTRAP NAME_PREFIX [ARG]}.
 *
 * <p>Each scenario asserts what the client got back (records, offsets, settings) and throws on
 * the first difference; the process then exits 1 with the reason on stderr. On success it prints
 * {@code PASS SCENARIO} last. tests/test_java_client.py runs each scenario as its own pytest test.
 */
public final class Main {
    interface Scenario {
        void run(Env env) throws Exception;
    }

    private static final Map<String, Scenario> SCENARIOS = new TreeMap<>();

    static {
        SCENARIOS.put("produce-defaults", ProducerScenarios::defaults);
        SCENARIOS.put("produce-codec", ProducerScenarios::codec);
        SCENARIOS.put("group-assignor", ConsumerScenarios::groupAssignor);
        SCENARIOS.put("manual-assign", ConsumerScenarios::manualAssignment);
        SCENARIOS.put("commit-restart", ConsumerScenarios::commitAndRestart);
        SCENARIOS.put("admin-topics", AdminScenarios::topics);
        SCENARIOS.put("admin-cluster-offsets", AdminScenarios::clusterAndOffsets);
        SCENARIOS.put("admin-configs", AdminScenarios::configs);
        SCENARIOS.put("admin-groups", AdminScenarios::groups);
        SCENARIOS.put("admin-delete-records", AdminScenarios::deleteRecords);
    }

    private Main() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 3 || args.length > 4 || !SCENARIOS.containsKey(args[0])) {
            System.err.println("usage: Main SCENARIO BOOTSTRAP NAME_PREFIX [ARG]; scenarios: " + SCENARIOS.keySet());
            System.exit(2);
        }
        Env env = new Env(args[1], args[2], args.length == 4 ? args[3] : null);
        SCENARIOS.get(args[0]).run(env);
        System.out.println("PASS " + args[0] + (env.arg() == null ? "" : " " + env.arg()));
        // Client threads (e.g. a closed consumer's heartbeat) must not keep the JVM alive.
        System.exit(0);
    }
}
