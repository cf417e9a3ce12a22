"""Running Java programs for the end-to-end tests: the Java client tests (tests/java, built with
Maven) and Apache Kafka's own tools (the jars `scripts/kafka classpath` names).

Maven and the Kafka jars keep their downloads outside the repository (~/.m2 and scripts/kafka's
cache); `scripts/install-test-deps` fetches them, so a test run asks no registry.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
JAVA_TESTS_DIR = REPO_ROOT / "tests" / "java"
BUILD_TIMEOUT_S = 600

# A client JVM here does little work: a small heap, and no optimising compiler, which costs more
# CPU at start-up than it saves on this 2-core machine.
JVM_OPTIONS = [
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
]


def java() -> str:
    path = shutil.which("java")
    assert path is not None, "java is not installed (scripts/install-test-deps installs it)"
    return path


@functools.cache
def java_client_tests_classpath() -> str:
    """Compiles tests/java once per session; its classes and kafka-clients' jars."""
    mvn = shutil.which("mvn")
    assert mvn is not None, "mvn is not installed (scripts/install-test-deps installs it)"
    result = subprocess.run(
        [mvn, "-B", "-q", "compile"],
        cwd=JAVA_TESTS_DIR,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"mvn compile of tests/java failed:\n{result.stdout[-6000:]}{result.stderr[-3000:]}"
    jars = (JAVA_TESTS_DIR / "target" / "classpath.txt").read_text().strip()
    return f"{JAVA_TESTS_DIR / 'target' / 'classes'}:{jars}"


@functools.cache
def kafka_tools_classpath() -> str:
    """The classpath of Apache Kafka's jars, as scripts/kafka installs them."""
    result = subprocess.run(
        [str(REPO_ROOT / "scripts" / "kafka"), "classpath"],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"scripts/kafka classpath failed:\n{result.stderr[-3000:]}"
    classpath = result.stdout.strip()
    assert "kafka-tools" in classpath, f"no kafka-tools jar on the classpath: {classpath[:500]}"
    return classpath


def run_java(
    classpath: str,
    main_class: str,
    *args: str,
    input: str | None = None,
    timeout_s: float = 150.0,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [java(), *JVM_OPTIONS, "-cp", classpath, main_class, *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
