module github.com/sparkinfer/cc

go 1.26.0

require (
	github.com/ardanlabs/jinja v1.8.0 // indirect
	github.com/beevik/etree v1.8.1 // indirect
	github.com/google/go-attestation v0.6.4 // indirect
	github.com/google/go-configfs-tsm v0.3.3-0.20240919001351-b4b5b84fdcbc // indirect
	github.com/google/go-sev-guest v0.15.0 // indirect
	github.com/google/go-tdx-guest v0.3.2-0.20241009005452-097ee70d0843 // indirect
	github.com/google/go-tpm v0.9.8 // indirect
	github.com/google/go-tpm-tools v0.4.7 // indirect
	github.com/google/logger v1.1.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/rogpeppe/go-internal v1.16.0 // indirect
	github.com/russellhaering/goxmldsig v1.6.1 // indirect
	github.com/sigstore/cosign/v2 v2.6.5 // indirect
	github.com/transparency-dev/formats v0.1.1 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/mod v0.43.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/tools v0.52.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
