"""A connection's produce requests take their offsets in the order they were sent, as Kafka
serves each connection's requests in order: a producer without idempotence that keeps many
requests in flight relies on it (librdkafka's test 0041 found records stored out of order)."""

from __future__ import annotations

import clients
from conftest import Broker

RECORDS = 2_000
# Large enough that appends wait for the write buffers while others queue behind them.
VALUE_BYTES = 100_000
ROUNDS = 2


def test_pipelined_produce_requests_keep_their_order(broker: Broker, unique) -> None:
    for round in range(ROUNDS):
        topic = unique(f"topic-{round}")
        clients.create_topic(broker.bootstrap, topic, 1)
        pad = b"x" * VALUE_BYTES
        # No retries: a retried batch may land behind later ones, which is the client's doing.
        producer = clients.producer(
            broker.bootstrap,
            **{"enable.idempotence": False, "retries": 0, "max.in.flight.requests.per.connection": 1_000},
        )
        acked = clients.produce_acked(producer, topic, [(None, b"%08d" % i + pad) for i in range(RECORDS)], 0)
        offset_of = {int(r.value[:8]): r.offset for r in acked}
        out_of_order = [i for i in range(1, RECORDS) if offset_of[i] < offset_of[i - 1]]
        assert not out_of_order, f"round {round}: record i got an offset below record i-1's, i in {out_of_order[:10]}"

        read = clients.read_partitions(broker.bootstrap, topic, [0])[0]
        assert [r.offset for r in read] == list(range(RECORDS))
        assert [int(r.value[:8]) for r in read] == list(range(RECORDS))
