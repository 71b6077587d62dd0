package e2e

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// gossipAddr is the bound gossip address from a node's ready file.
func gossipAddr(t *testing.T, p *proc) string {
	t.Helper()
	if p.Gossip == "" {
		t.Fatalf("no gossip address in the ready file:\n%s", p.logs())
	}
	return p.Gossip
}

type clusterMember struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Kafka string `json:"kafka"`
	HTTP  string `json:"http"`
}

// members is GET /cluster of p: member id -> member.
func members(t *testing.T, p *proc) map[string]clusterMember {
	t.Helper()
	resp, err := http.Get("http://" + p.HTTP + "/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Gossip  bool            `json:"gossip"`
		Members []clusterMember `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	out := map[string]clusterMember{}
	for _, m := range st.Members {
		out[m.ID] = m
	}
	return out
}

// metadataBrokers asks p's Kafka listener (and only it) for Metadata and
// returns the brokers as host:port sorted.
func metadataBrokers(t *testing.T, p *proc) []string {
	t.Helper()
	var out []string
	for _, b := range metadataOf(t, p, kmsg.NewPtrMetadataRequest()).Brokers {
		out = append(out, b.Host+":"+strconv.Itoa(int(b.Port)))
	}
	slices.Sort(out)
	return out
}

// TestClusterThreeNodes runs three `tributary dev` processes that gossip
// on loopback (n3 joins through n2, n2 through n1): each lists all three
// alive in GET /cluster and as Kafka brokers; after kill -9 of n3 the
// survivors declare it dead and stop listing it as a broker. Each node has
// its own catalog: this tests membership, not partition ownership.
func TestClusterThreeNodes(t *testing.T) {
	base := t.TempDir()
	start := func(id string, join ...string) *proc {
		args := []string{"--node-id", id, "--gossip-addr", "127.0.0.1:0", "--gossip-profile", "local"}
		for _, j := range join {
			args = append(args, "--join", j)
		}
		return startDev(t, filepath.Join(base, id), args...)
	}
	n1 := start("n1")
	n2 := start("n2", gossipAddr(t, n1))
	n3 := start("n3", gossipAddr(t, n2))
	nodes := []*proc{n1, n2, n3}
	waitFor(t, 20*time.Second, "every node to see three alive members", func() bool {
		for _, p := range nodes {
			ms := members(t, p)
			for _, id := range []string{"n1", "n2", "n3"} {
				if ms[id].State != "alive" {
					return false
				}
			}
			if ms["n3"].Kafka != n3.Kafka || ms["n1"].HTTP != n1.HTTP {
				return false
			}
		}
		return true
	})
	all := []string{n1.Kafka, n2.Kafka, n3.Kafka}
	slices.Sort(all)
	if got := metadataBrokers(t, n2); !slices.Equal(got, all) {
		t.Fatalf("n2's Metadata brokers %v, want %v", got, all)
	}

	n3.kill()
	killed := time.Now()
	waitFor(t, 30*time.Second, "n1 and n2 to declare n3 dead", func() bool {
		return members(t, n1)["n3"].State == "dead" && members(t, n2)["n3"].State == "dead"
	})
	t.Logf("n3 declared dead %s after kill -9", time.Since(killed).Round(100*time.Millisecond))
	live := []string{n1.Kafka, n2.Kafka}
	slices.Sort(live)
	if got := metadataBrokers(t, n1); !slices.Equal(got, live) {
		t.Fatalf("n1's Metadata brokers after n3 died: %v, want %v", got, live)
	}
	n2.stop()
	deadline := time.Now().Add(10 * time.Second)
	for members(t, n1)["n2"].State != "left" {
		if time.Now().After(deadline) {
			t.Fatalf("n1 sees n2 %q, not left, 10s after n2 stopped:\nn1:\n%s\nn2:\n%s", members(t, n1)["n2"].State, n1.logs(), n2.logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
