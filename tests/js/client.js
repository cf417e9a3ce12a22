// kafkajs 2.2.4 driven by the end-to-end tests (tests/test_kafkajs.py).
//
//   node client.js produce BROKER TOPIC PARTITIONS COUNT OUT.json
//     Idempotent producer, acks=all. Record i (key k<i>, value v<i>) goes to partition
//     i % PARTITIONS; each partition's records go in one request, so each acknowledged offset is
//     the batch's base offset plus the record's place in it.
//   node client.js consume-group BROKER TOPIC GROUP COUNT OUT.json
//     Group consumer from the earliest offset until COUNT records arrived; leaves the group.
//
// OUT.json gets {"records": [[partition, offset, key, value], ...]}. Logs go to stderr; the exit
// code is non-zero on any error or when TIMEOUT_MS passes first.
'use strict';

const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

const TIMEOUT_MS = 60000;

function client(broker) {
  return new Kafka({
    clientId: 'spindle-tests-kafkajs',
    brokers: [broker],
    logLevel: logLevel.WARN,
    logCreator: () => ({ level, log }) => {
      process.stderr.write(`kafkajs ${level} ${JSON.stringify(log)}\n`);
    },
    retry: { retries: 5 },
  });
}

async function produce(broker, topic, partitions, count) {
  const producer = client(broker).producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const records = [];
  try {
    for (let p = 0; p < partitions; p++) {
      const messages = [];
      for (let i = p; i < count; i += partitions) {
        messages.push({ key: `k${i}`, value: `v${i}`, partition: p });
      }
      if (messages.length === 0) continue;
      const [ack] = await producer.send({ topic, acks: -1, messages });
      if (ack.errorCode !== 0 || ack.partition !== p) {
        throw new Error(`partition ${p}: unexpected acknowledgement ${JSON.stringify(ack)}`);
      }
      const base = Number(ack.baseOffset);
      messages.forEach((m, n) => records.push([p, base + n, m.key, m.value]));
    }
  } finally {
    await producer.disconnect();
  }
  return records;
}

async function consumeGroup(broker, topic, group, count) {
  const consumer = client(broker).consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 1000 });
  await consumer.connect();
  const records = [];
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await new Promise((resolve, reject) => {
      consumer.on(consumer.events.CRASH, (e) => reject(e.payload.error));
      consumer
        .run({
          eachMessage: async ({ partition, message }) => {
            records.push([partition, Number(message.offset), message.key.toString(), message.value.toString()]);
            if (records.length >= count) resolve();
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return records;
}

async function main() {
  const [command, broker, topic, arg, count, out] = process.argv.slice(2);
  const timer = setTimeout(() => {
    process.stderr.write(`timed out after ${TIMEOUT_MS} ms\n`);
    process.exit(3);
  }, TIMEOUT_MS);
  let records;
  if (command === 'produce') {
    records = await produce(broker, topic, Number(arg), Number(count));
  } else if (command === 'consume-group') {
    records = await consumeGroup(broker, topic, arg, Number(count));
  } else {
    throw new Error(`unknown command ${command}`);
  }
  fs.writeFileSync(out, JSON.stringify({ records }));
  clearTimeout(timer);
}

main().catch((e) => {
  process.stderr.write(`${e.stack || e}\n`);
  process.exit(1);
});
