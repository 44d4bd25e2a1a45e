package systemtest

// A private Apache Kafka: a single-node KRaft broker (broker and controller
// in one JVM) of one test, from the jars scripts/services.sh installed, on
// free loopback ports and a log directory of its own, which the test
// SIGKILLs and starts again on both (the shared broker of
// scripts/services.sh must never be killed: other tests use it).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/microbatch/microbatch/internal/kafkautil"
	"github.com/microbatch/microbatch/internal/testutil"
)

// privateKafkaHeap is the private broker's heap: a few topics of a few
// MiB. Small, as several of them run beside the suite on 2 cores.
const privateKafkaHeap = "256m"

// kafkaLibs is the directory of the Kafka jars scripts/services.sh
// installed (`scripts/services.sh kafka-libs`). None skips the test,
// naming why — or fails it when the servers are part of the run, as
// serverBinary does.
func kafkaLibs(t *testing.T) string {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "scripts", "services.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(script, "kafka-libs")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	libs := strings.TrimSpace(stdout.String())
	if err == nil && libs != "" {
		return libs
	}
	msg := fmt.Sprintf("Apache Kafka's jars: %s kafka-libs: %v %s", script, err, strings.TrimSpace(stderr.String()))
	if testutil.ServersRequired() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// kafkaClusterID is a random KRaft cluster id: 16 bytes in URL-safe
// base64 without padding, not starting with '-' (as Kafka makes them).
func kafkaClusterID(t *testing.T) string {
	t.Helper()
	for {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		if id := base64.RawURLEncoding.EncodeToString(b); id[0] != '-' {
			return id
		}
	}
}

// privateKafkaConfig is the broker's server.properties: one node,
// PLAINTEXT on port, its controller on controllerPort, its log in
// dataDir, and the internal topics (offsets, transactions) with one
// replica. A restarted node's controller refuses its broker's
// registration until the registration of before the kill has expired
// (DUPLICATE_BROKER_REGISTRATION): broker.session.timeout.ms, 9 s by
// default, is cut to 3 s.
func privateKafkaConfig(port, controllerPort int, dataDir string) string {
	return fmt.Sprintf(`process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:%[2]d
listeners=PLAINTEXT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d
advertised.listeners=PLAINTEXT://127.0.0.1:%[1]d
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=%[3]s
num.partitions=4
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=500
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2
`, port, controllerPort, dataDir)
}

// privateKafkaLog4j sends the broker's log to server.log in its
// directory (kafka.logs.dir), where privateServer.logTail finds it.
const privateKafkaLog4j = `<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="server" fileName="${sys:kafka.logs.dir}/server.log" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="kafka.request.logger" level="WARN"/>
  </Loggers>
</Configuration>
`

// startPrivateKafka formats a KRaft log directory in a temp directory and
// starts Apache Kafka on it, on two free loopback ports (its listener and
// its controller's). It returns once the broker answers a metadata
// request, with the server and its address. A restart (start again after
// kill) keeps the cluster id, topics and records of the log directory.
func startPrivateKafka(t *testing.T) (*privateServer, string) {
	t.Helper()
	libs := kafkaLibs(t)
	java := serverBinary(t, "Java (Apache Kafka's runtime)", "java")
	dir := t.TempDir()
	port := freePort(t)
	controllerPort := freePort(t)
	for controllerPort == port {
		controllerPort = freePort(t)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	props := filepath.Join(dir, "server.properties")
	log4j := filepath.Join(dir, "log4j2.xml")
	if err := os.WriteFile(props, []byte(privateKafkaConfig(port, controllerPort, filepath.Join(dir, "data"))), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(log4j, []byte(privateKafkaLog4j), 0o644); err != nil {
		t.Fatal(err)
	}
	jvm := []string{"-Xms" + privateKafkaHeap, "-Xmx" + privateKafkaHeap, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Xshare:auto", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
		"-Dkafka.logs.dir=" + dir, "-Dlog4j2.configurationFile=file:" + log4j, "-cp", filepath.Join(libs, "*")}

	// kafka-storage format: the cluster id and the bootstrap metadata.
	// 4.x has the Scala kafka.tools.StorageTool, newer lines may only have
	// the Java one (as scripts/services.sh tries both).
	id := kafkaClusterID(t)
	var out []byte
	var err error
	for _, class := range []string{"kafka.tools.StorageTool", "org.apache.kafka.tools.StorageTool"} {
		ctx, cancel := context.WithTimeout(context.Background(), privateStartWait)
		out, err = exec.CommandContext(ctx, java, append(append([]string(nil), jvm...),
			class, "format", "--cluster-id", id, "--config", props)...).CombinedOutput()
		cancel()
		if err == nil || !bytes.Contains(out, []byte("Could not find or load main class")) {
			break
		}
	}
	if err != nil {
		t.Fatalf("formatting the KRaft log directory (kafka-storage format): %v\n%s", err, out)
	}

	ready := func(ctx context.Context) error {
		conf := kafkautil.Config("microbatch-test-ready")
		conf.Net.DialTimeout = time.Second
		conf.Metadata.Retry.Max = 0
		c, err := sarama.NewClient([]string{addr}, conf)
		if err != nil {
			return err
		}
		defer c.Close()
		if len(c.Brokers()) == 0 {
			return fmt.Errorf("no brokers in the metadata of %s", addr)
		}
		return ctx.Err()
	}
	s := newPrivateServer(t, "Apache Kafka on "+addr, port, filepath.Join(dir, "server.log"), ready,
		append(append([]string{java}, jvm...), "kafka.Kafka", props)...)
	s.start(t)
	return s, addr
}
