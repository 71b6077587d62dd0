package node

import "github.com/tributary-io/tributary/config"

// StorageConfig configures the warehouse's object store (edge and cloud).
type StorageConfig = config.Storage

// MaintenanceConfig configures table maintenance (edge and cloud).
type MaintenanceConfig = config.Maintenance

// ByteSize is a size in bytes that YAML may write as 64MiB, 1GiB, 512KB, 1000.
type ByteSize = config.ByteSize

// ParseByteSize parses "64MiB", "1GB", "512k", "1000".
func ParseByteSize(s string) (ByteSize, error) { return config.ParseByteSize(s) }
