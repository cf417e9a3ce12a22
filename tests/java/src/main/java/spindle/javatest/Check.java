package spindle.javatest;

import java.util.Objects;

/** Assertions that say what differed; the JVM's `assert` is off by default, so not that. */
final class Check {
    private Check() {}

    static void equal(Object expected, Object actual, String what) {
        if (!Objects.equals(expected, actual)) {
            throw new AssertionError(what + ": expected " + expected + ", got " + actual);
        }
    }

    static void that(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError(what);
        }
    }

    /** Runs {@code action}, which must throw an exception whose cause chain holds {@code type}. */
    static <T extends Throwable> T fails(Class<T> type, String what, ThrowingRunnable action) {
        try {
            action.run();
        } catch (Throwable thrown) {
            for (Throwable t = thrown; t != null; t = t.getCause()) {
                if (type.isInstance(t)) {
                    return type.cast(t);
                }
            }
            throw new AssertionError(what + ": expected " + type.getSimpleName() + ", got " + thrown, thrown);
        }
        throw new AssertionError(what + ": expected " + type.getSimpleName() + ", but it succeeded");
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }
}
