# Tributary — see README.md.
#   make run    build and start the all-in-one dev setup (edge node + simulated fleet)
#   make test   install what the tests need, vet, unit tests with -race, end-to-end tests
#   make bench  benchmarks (load runs against Tributary and mosquitto side by side)

GO        ?= go
BIN       := bin/tributary
PKGS      := ./...
UNIT_PKGS  = $(shell $(GO) list ./... | grep -v /e2e)
APT_PKGS  := mosquitto mosquitto-clients kcat curl openssl postgresql chromium nftables iproute2
DATA      ?= ./data
VERSITYGW := v1.8.0
FAKEGCS := v1.56.1
AZURITE := 3.37.0
# SeaweedFS (an independent Iceberg REST catalog and S3 store) is built
# from tools/seaweedfs, a wrapper module pinning it (go install refuses
# seaweedfs: its go.mod has a replace line), once into WEED.
WEED ?= $(HOME)/.cache/tributary/seaweedfs/weed

.PHONY: all build build-edge run test deps deps-base weed vet unit e2e bench fuzz clean fmt proto docs

all: build

# The first build compiles every dependency (about 1.9 GB of build cache;
# minutes on a small machine, with nothing printed meanwhile): say so.
build:
	@test -x $(BIN) || echo "building $(BIN): the first build compiles every dependency and takes minutes (later builds take seconds)"
	$(GO) build -o $(BIN) ./cmd/tributary

# build-edge builds $(EDGE_BIN): the binary without the SDKs of the
# warehouse stores not in STORES (space- or comma-separated: s3, gcs,
# azure; file:// is always in). Each store left out is the build tag
# notrib_<store>; a build without a store refuses a warehouse on it at
# config check and start-up. `make build-edge STORES=s3` is an edge on S3;
# STORES= (empty) is file:// only. EDGE_LDFLAGS strips the symbol table
# and DWARF by default (panics still print file:line stack traces);
# EDGE_LDFLAGS= keeps them. See docs/operations.md, "Smaller builds".
ALL_STORES := s3 gcs azure
STORES     ?= s3
EDGE_BIN   ?= bin/tributary-edge
EDGE_LDFLAGS ?= -s -w
comma      := ,
space      := $(subst ,, )
EDGE_TAGS   = $(subst $(space),$(comma),$(strip $(foreach s,$(ALL_STORES),$(if $(filter $(s),$(subst $(comma), ,$(STORES))),,notrib_$(s)))))
build-edge:
	@for s in $(subst $(comma), ,$(STORES)); do case " $(ALL_STORES) " in *" $$s "*) ;; \
	  *) echo "STORES: unknown store $$s (want some of: $(ALL_STORES))"; exit 2;; esac; done
	$(GO) build -tags '$(EDGE_TAGS)' -ldflags '$(EDGE_LDFLAGS)' -o $(EDGE_BIN) ./cmd/tributary
	@ls -l $(EDGE_BIN) | awk '{printf "%s: %.1f MB\n", $$NF, $$5/1e6}'

run: build
	$(BIN) dev --data $(DATA)

# deps installs the real clients and servers the tests talk to. It needs
# root (CI runs as root) and a reachable Debian mirror; it fails loudly
# rather than letting tests skip. The partition suite (e2e/partition_*)
# needs ip (iproute2) for network namespaces and nft (nftables) for its
# silent cuts. The doc run (e2e TestDocs) runs curl and openssl as the docs do.
deps: deps-base weed

deps-base:
	@missing=""; for b in mosquitto mosquitto_pub mosquitto_sub kcat curl openssl nft ip; do \
	  command -v $$b >/dev/null 2>&1 || [ -x /usr/sbin/$$b ] || missing="$$missing $$b"; done; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages for:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "need root to apt-get install $(APT_PKGS)"; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PKGS) >/dev/null; \
	fi
	@gobin=$$($(GO) env GOPATH)/bin; \
	if ! command -v versitygw >/dev/null 2>&1 && [ ! -x $$gobin/versitygw ]; then \
	  echo "installing versitygw $(VERSITYGW) (a real S3 server for the tests)"; \
	  $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW); \
	fi; \
	if ! command -v fake-gcs-server >/dev/null 2>&1 && [ ! -x $$gobin/fake-gcs-server ]; then \
	  echo "installing fake-gcs-server $(FAKEGCS) (a real GCS emulator for the tests)"; \
	  $(GO) install github.com/fsouza/fake-gcs-server@$(FAKEGCS); \
	fi
	@if ! command -v azurite-blob >/dev/null 2>&1 && [ ! -x $$HOME/.cache/tributary/azurite/node_modules/.bin/azurite-blob ]; then \
	  echo "installing azurite $(AZURITE) into ~/.cache/tributary/azurite (a real Azure Blob emulator for the tests)"; \
	  mkdir -p $$HOME/.cache/tributary/azurite && cd $$HOME/.cache/tributary/azurite && \
	  npm install --no-audit --no-fund --silent azurite@$(AZURITE); \
	fi
	cd e2e/testdata/duckdb && npm ci --no-audit --no-fund --silent
	$(GO) mod download

# weed builds SeaweedFS into WEED once (only the e2e tests use it).
weed:
	@if [ ! -x $(WEED) ]; then \
	  echo "building SeaweedFS into $(WEED) (a real Iceberg REST catalog and S3 store for the tests; minutes, once)"; \
	  mkdir -p $$(dirname $(WEED)) && cd tools/seaweedfs && $(GO) build -o $(WEED).tmp github.com/seaweedfs/seaweedfs/weed && mv $(WEED).tmp $(WEED); \
	fi

vet:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# unit also runs the store tests of a build with every notrib_ tag (file://
# only; see build-edge): each left-out store is refused by name.
unit:
	$(GO) test -race -count=1 -timeout 15m $(UNIT_PKGS)
	$(GO) test -count=1 -tags 'notrib_s3,notrib_gcs,notrib_azure' -run 'StoreLinked|StoreNotLinked' ./tables/ ./uplink/ ./config/

e2e: build
	$(GO) test -count=1 -timeout 30m ./e2e/...

# test builds SeaweedFS (minutes on a fresh machine, e2e only) in the
# background while vet and the unit tests run, and fails if that build did.
WEED_LOG := $(HOME)/.cache/tributary/seaweedfs/build.log
test: deps-base
	@mkdir -p $$(dirname $(WEED_LOG)); \
	$(MAKE) --no-print-directory weed > $(WEED_LOG) 2>&1 & weed=$$!; \
	[ -x $(WEED) ] || echo "building SeaweedFS in the background (log: $(WEED_LOG))"; \
	$(MAKE) --no-print-directory vet unit; rc=$$?; \
	if ! wait $$weed; then cat $(WEED_LOG); echo "make test: building SeaweedFS failed (log above)"; exit 1; fi; \
	[ $$rc -eq 0 ] || exit $$rc; \
	$(MAKE) --no-print-directory e2e

bench: deps build
	$(GO) test -run '^$$' -bench . -benchtime 3s ./wal/
	$(GO) test -run '^$$' -bench WriteParquet -benchtime 5x ./tables/
	$(GO) test -count=1 -timeout 60m -tags bench -run 'TestBench|TestHostileWire' -v ./e2e/

# fuzz explores every decoder. FUZZTIME is Go's -fuzztime: the default
# 1000000x means one million executions of each target in FUZZ_TARGETS
# (counted over all fuzz workers; a target stops as soon as it has them), so
# the coverage does not depend on how busy the machine is, only the wall
# time does. A duration (FUZZTIME=30s) also works. FUZZ_SLOW_TARGETS get
# their own budget FUZZTIME_SLOW (a duration) and are not part of the
# million: the end-to-end targets drive a whole server per input (a TCP
# connection, a catalog round trip, a long-poll fetch), whose decoders have
# fast targets of their own: mqtt:FuzzPacketDecode and kafka:FuzzDecodeRequest. A decoder's fuzz
# target lives in a package whose test binary does not link the table
# stack (replica/wire, pulsar/wire, uplink/quarantine): Go's coverage
# counters span the whole binary, so the same decoder ran 10-200 times
# slower per execution in a binary with Iceberg and Arrow. The seed corpora
# under testdata/fuzz run in every `go test`. The Go fuzz engine
# occasionally fails a run with "context deadline exceeded" and no failing
# input (its own coordinator timing out on a busy machine, not a finding);
# such a run is retried once. Any other failure, or a target name that
# matches no fuzz test, stops make. Each target's wall time is printed; it
# depends on the machine's load.
FUZZTIME      ?= 1000000x
FUZZTIME_SLOW ?= 30s
FUZZ_TARGETS := wal:FuzzDecodeRecord wal:FuzzDecodeChunk wal:FuzzDecodeMeta wal:FuzzDecodeBatchEntry wal:FuzzDecodeJournal mqtt:FuzzPacketDecode mqtt:FuzzRouter \
	kafka/produce:FuzzRequestDecode kafka:FuzzRecordBatch kafka:FuzzDecodeRequest \
	cluster:FuzzDecodeMeta cluster:FuzzInspect replica/wire:FuzzDecodeAppend replica/wire:FuzzDecodeReply \
	peer:FuzzReadFrame mqtt:FuzzDecodeForward mqtt:FuzzDecodeInterest pulsar/wire:FuzzFrame
FUZZ_TARGETS += tables/delta:FuzzDecodeCommit
FUZZ_TARGETS += pulsar/wire:FuzzBatch
FUZZ_TARGETS += subscription/wire:FuzzAckedRanges uplink/quarantine:FuzzDecodeQuarantine auth:FuzzParsePasswd auth:FuzzSCRAM auth:FuzzToken kafka:FuzzParseSASL
# tables/rest:FuzzCommitDecode decodes with iceberg-go's own JSON types,
# so its binary links the table stack: its million takes about 50 minutes
# here (330 executions a second), the rest a few minutes each.
FUZZ_TARGETS += tables/rest:FuzzCommitDecode
FUZZ_TARGETS += internal/kbatch:FuzzParseRecordInPlace
FUZZ_TARGETS += cloudmqtt/wire:FuzzReadPacket cloudmqtt/wire:FuzzParse
FUZZ_TARGETS += httpapi/wire:FuzzProduceRecord tables/typed:FuzzDecode internal/pqkafka:FuzzEncode
FUZZ_TARGETS += cloudwrite/wire:FuzzDecodeObject cloudwrite/wire:FuzzDecodeSegment
FUZZ_SLOW_TARGETS := mqtt:FuzzPacketHandlingServer kafka/consume:FuzzCloudRequestServer \
	tables/rest:FuzzCommitRequestServer
# fuzz1 runs target $$t for $$ft, prints its wall time, retries the engine flake once.
fuzz1 = pkg=$${t%%:*}; fn=$${t\#\#*:}; \
	for try in 1 2; do \
	  echo "fuzz $$fn ($$pkg) for $$ft"; start=$$(date +%s); \
	  $(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $$ft -fuzzminimizetime 2s ./$$pkg/ >.fuzz.out 2>&1; rc=$$?; \
	  tail -n 3 .fuzz.out; echo "fuzz $$fn ($$pkg): exit $$rc after $$(( $$(date +%s) - start ))s"; \
	  if grep -q 'no fuzz tests to fuzz' .fuzz.out; then echo "fuzz $$fn: no such target in ./$$pkg"; rc=1; fi; \
	  [ $$rc -eq 0 ] && break; \
	  if [ $$try -eq 1 ] && grep -q 'context deadline exceeded' .fuzz.out && ! grep -q 'Failing input written' .fuzz.out; then \
	    echo "fuzz $$fn: engine timeout without a failing input, retrying once"; continue; fi; \
	  cat .fuzz.out; rm -f .fuzz.out; exit 1; \
	done; rm -f .fuzz.out
fuzz:
	@for t in $(FUZZ_TARGETS); do ft=$(FUZZTIME); $(fuzz1); done
	@for t in $(FUZZ_SLOW_TARGETS); do ft=$(FUZZTIME_SLOW); $(fuzz1); done

# proto regenerates the committed protocol code: Pulsar's (pulsar/pb) from
# pulsar/pb/PulsarApi.proto, and the gRPC API's (grpcapi/pb, with the
# Connect handlers and clients in grpcapi/pb/pbconnect) from
# grpcapi/pb/streams.proto. Not part of build or test: the generated Go is
# committed. Needs protoc (Debian: protobuf-compiler); protoc-gen-go and
# protoc-gen-connect-go are installed with go install.
PROTOC_GEN_GO := v1.36.12
PROTOC_GEN_CONNECT_GO := v1.21.1
proto:
	@command -v protoc >/dev/null 2>&1 || { echo "need protoc (apt-get install protobuf-compiler)"; exit 1; }
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO)
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc -I . --go_out=. --go_opt=paths=source_relative pulsar/pb/PulsarApi.proto
	$(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO)
	PATH="$$($(GO) env GOPATH)/bin:$$PATH" protoc -I . --go_out=. --go_opt=paths=source_relative \
		--connect-go_out=. --connect-go_opt=paths=source_relative grpcapi/pb/streams.proto

# docs regenerates docs/configuration.md from the Config structs (their
# fields, doc comments and defaults); cmd/tributary's
# TestConfigReferenceCurrent fails when the committed file is stale.
docs: build
	$(BIN) config reference > docs/configuration.md

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
