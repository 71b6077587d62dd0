module github.com/tributary-io/tributary

go 1.26.0
