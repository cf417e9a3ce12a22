// Command franzgo is our franz-go check of what the kgo test suite leaves out against a broker:
// every codec (kgo's own tests send only snappy and gzip to one), the idempotent producer's ids
// on the records read back, and a group member that commits part of a topic and a new member
// that resumes at the commit. It exits 1 on the first difference; tests/test_franz_go.py runs
// it for each codec and checks its JSON report against what confluent-kafka reads.
//
//	franzgo -brokers HOST:PORT -topic T -group G -codec lz4 -records 3000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const partitions = 3

var codecs = map[string]struct {
	codec kgo.CompressionCodec
	attr  uint8 // the codec's number in a batch's attributes
}{
	"none":   {kgo.NoCompression(), 0},
	"gzip":   {kgo.GzipCompression(), 1},
	"snappy": {kgo.SnappyCompression(), 2},
	"lz4":    {kgo.Lz4Compression(), 3},
	"zstd":   {kgo.ZstdCompression(), 4},
}

// placed is one record where the broker put it, as the report lists it.
type placed struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "seed broker")
	topic := flag.String("topic", "", "topic to create")
	group := flag.String("group", "", "consumer group")
	codecName := flag.String("codec", "none", "none, gzip, snappy, lz4 or zstd")
	records := flag.Int("records", 3000, "records to produce")
	flag.Parse()
	codec, ok := codecs[*codecName]
	if !ok || *topic == "" || *group == "" || *records < 2 {
		fail("usage: franzgo -brokers B -topic T -group G -codec C -records N (N >= 2)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	produced := produce(ctx, *brokers, *topic, codec.codec, *records)
	// The first member reads and commits part of the records, then leaves.
	first := consume(ctx, *brokers, *topic, *group, codec.attr, *records/3, produced)
	// A new member of the group starts at those commits and reads exactly the rest.
	rest := consume(ctx, *brokers, *topic, *group, codec.attr, *records-len(first), produced)
	seen := map[placed]bool{}
	for _, r := range append(first, rest...) {
		if seen[r] {
			fail(fmt.Sprintf("read twice: %+v", r))
		}
		seen[r] = true
	}
	if len(seen) != len(produced) {
		fail(fmt.Sprintf("read %d distinct records, produced %d", len(seen), len(produced)))
	}
	list := make([]placed, 0, len(produced))
	for p := range produced {
		list = append(list, p)
	}
	report, err := json.Marshal(map[string]any{"produced": list, "first_member": len(first)})
	if err != nil {
		fail(err.Error())
	}
	fmt.Println(string(report))
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "franzgo:", msg)
	os.Exit(1)
}

// produce creates the topic and sends the records (idempotent, acks=all: franz-go's defaults)
// round-robin over its partitions, checking each partition's offsets are dense from 0.
func produce(ctx context.Context, brokers, topic string, codec kgo.CompressionCodec, n int) map[placed]bool {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(codec),
		kgo.ProducerLinger(20*time.Millisecond))
	if err != nil {
		fail(err.Error())
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		fail("create topic: " + err.Error())
	}

	recs := make([]*kgo.Record, n)
	for i := range recs {
		value := fmt.Sprintf("value-%d-%0*d", i, 64, 0) // compressible
		recs[i] = &kgo.Record{Partition: int32(i % partitions), Key: []byte(fmt.Sprint("k", i)), Value: []byte(value)}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		fail("produce: " + err.Error())
	}
	out := map[placed]bool{}
	next := map[int32]int64{}
	for _, r := range recs {
		if r.Offset != next[r.Partition] {
			fail(fmt.Sprintf("%s acknowledged at %d/%d, expected offset %d", r.Key, r.Partition, r.Offset, next[r.Partition]))
		}
		next[r.Partition]++
		out[placed{r.Partition, r.Offset, string(r.Key), string(r.Value)}] = true
	}
	return out
}

// consume joins the group, reads exactly n records (each one produced, in its batch's codec,
// from an idempotent producer), commits them and leaves.
func consume(ctx context.Context, brokers, topic, group string, attr uint8, n int, produced map[placed]bool) []placed {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		// Close waits for the fetch in flight, which long-polls an exhausted topic for this long
		// (5 s by default: half of each run).
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		fail(err.Error())
	}
	defer cl.Close()
	var got []placed
	for len(got) < n {
		fetches := cl.PollRecords(ctx, n-len(got))
		if err := ctx.Err(); err != nil {
			fail(fmt.Sprintf("read %d of %d records: %v", len(got), n, err))
		}
		fetches.EachError(func(t string, p int32, err error) { fail(fmt.Sprintf("fetch %s/%d: %v", t, p, err)) })
		for _, r := range fetches.Records() {
			p := placed{r.Partition, r.Offset, string(r.Key), string(r.Value)}
			switch {
			case !produced[p]:
				fail(fmt.Sprintf("read a record never produced: %+v", p))
			case r.Attrs.CompressionType() != attr:
				fail(fmt.Sprintf("record %s in a batch of codec %d, expected %d", r.Key, r.Attrs.CompressionType(), attr))
			case r.ProducerID < 0:
				fail(fmt.Sprintf("record %s has no producer id: the producer was not idempotent", r.Key))
			}
			got = append(got, p)
		}
		if err := cl.CommitRecords(ctx, fetches.Records()...); err != nil {
			fail("commit: " + err.Error())
		}
		cl.AllowRebalance()
	}
	return got
}
