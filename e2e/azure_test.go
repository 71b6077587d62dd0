package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Azurite's well-known development account.
const (
	azAccount   = "devstoreaccount1"
	azKey       = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
	azContainer = "lake"
)

// azuriteBin is azurite-blob, which `make deps` installs with npm into
// ~/.cache/tributary/azurite.
func azuriteBin(t *testing.T) string {
	t.Helper()
	if bin, err := exec.LookPath("azurite-blob"); err == nil {
		return bin
	}
	home, _ := os.UserHomeDir()
	bin := filepath.Join(home, ".cache", "tributary", "azurite", "node_modules", ".bin", "azurite-blob")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("azurite-blob not installed (`make deps` runs npm install azurite into ~/.cache/tributary/azurite): %v", err)
	}
	return bin
}

// startAzurite runs a real Azure Blob emulator, Azurite, on a loopback port
// with its data in a temp dir, and creates the container. It returns the
// blob endpoint (http://HOST:PORT/devstoreaccount1).
func startAzurite(t *testing.T) string {
	t.Helper()
	addr := freeLoopbackPort(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(azuriteBin(t), "--blobHost", "127.0.0.1", "--blobPort", port, "--location", t.TempDir(),
		"--skipApiVersionCheck", "--silent")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	endpoint := "http://" + addr + "/" + azAccount
	cred, err := azblob.NewSharedKeyCredential(azAccount, azKey)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := container.NewClientWithSharedKeyCredential(endpoint+"/"+azContainer, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "Azurite creates the container", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := cc.Create(ctx, nil)
		return err == nil
	})
	return endpoint
}

func azureStorage(endpoint string) string {
	return fmt.Sprintf("storage:\n  azure:\n    endpoint: %s\n    key: %s\n", endpoint, azKey)
}

func azureProps(endpoint string) map[string]string {
	host := endpoint[len("http://") : len(endpoint)-len("/"+azAccount)]
	return map[string]string{"adls.endpoint": host, "adls.protocol": "http",
		"adls.auth.shared-key.account.name": azAccount, "adls.auth.shared-key.account.key": azKey}
}

// TestAzureEdgeToCloud is TestGCSEdgeToCloud with the warehouse in
// Azurite, in the abfss:// form Spark, Trino and iceberg-go's adls FileIO
// read. The engine brings the account key itself (the catalog hands out
// the endpoint, never the key).
func TestAzureEdgeToCloud(t *testing.T) {
	endpoint := startAzurite(t)
	warehouse := "abfss://" + azContainer + "@" + azAccount + ".dfs.core.windows.net/warehouse"
	props := azureProps(endpoint)
	storeEdgeToCloud(t, warehouse, azureStorage(endpoint), props, map[string]string{
		"adls.auth.shared-key.account.name": azAccount, "adls.auth.shared-key.account.key": azKey})
}

// TestAzureCrash writes the warehouse as the azblob://CONTAINER/prefix
// alias with storage.azure.account; the tables record the abfss:// form
// (iceberg-go's adls FileIO reads them back).
func TestAzureCrash(t *testing.T) {
	endpoint := startAzurite(t)
	storeCrash(t, "azblob://"+azContainer+"/warehouse", azureStorage(endpoint)+"    account: "+azAccount+"\n", azureProps(endpoint))
}
