# Sourced by run.sh and peers.sh: starts the release server $BIN with gRPC on 127.0.0.1:$GRPC,
# stops it when the calling script exits, and returns once the port accepts connections.
PTC_LOG=error "$BIN" serve --grpc-addr "127.0.0.1:$GRPC" --http-addr 127.0.0.1:0 --metrics-addr 127.0.0.1:0 \
    >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait 2>/dev/null || true' EXIT
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$GRPC") 2>/dev/null && break; sleep 0.2; done
