module github.com/tributary-io/tributary

go 1.26.0

require (
	github.com/eclipse/paho.golang v0.23.0
	github.com/gorilla/websocket v1.5.3
	github.com/mochi-mqtt/server/v2 v2.7.9
)

require github.com/rs/xid v1.4.0 // indirect
