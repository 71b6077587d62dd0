package e2e

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

type nodeStatus struct {
	WAL struct {
		Records          int64 `json:"records"`
		Bytes            int64 `json:"bytes"`
		BudgetRejections int64 `json:"budget_rejections"`
	} `json:"wal"`
	Uplink struct {
		State   string `json:"state"`
		Commits int64  `json:"commits"`
	} `json:"uplink"`
	Kafka struct {
		DuplicateBatch  int64
		ProducedRecords int64
	} `json:"kafka"`
}

func status(t *testing.T, p *proc) nodeStatus {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + p.HTTP + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s nodeStatus
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func walDrained(t *testing.T, p *proc) bool {
	return status(t, p).WAL.Records == 0
}
