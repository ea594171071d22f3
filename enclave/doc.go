// Package enclave is the appliance's boot sequence inside the TEE: it finds
// the TEE and the GPUs, loads and measures the model, generates the keys,
// writes the attestation statement and produces evidence for it on demand.
// Package enclave/server serves the HTTP API on top of it.
//
// # Boot
//
// Boot, in order:
//
//  1. opens the TEE (OpenTEE): TDX or SEV-SNP through configfs-tsm
//     (/sys/kernel/config/tsm/report, github.com/google/go-configfs-tsm),
//     else /dev/tdx_guest (github.com/google/go-tdx-guest) or /dev/sev-guest
//     (github.com/google/go-sev-guest); "sim" for machines without a TEE. With
//     "auto" and no TEE it refuses to start with a *NoTEEError naming --tee sim;
//  2. loads the model (a GGUF file, or the embedded stories260K) with package
//     engine and measures it: SHA-256 of the bytes the engine runs (the
//     memory-mapped file, not a second read), and the kernels library's
//     digest when the CUDA backend is used (64 zeros otherwise);
//  3. hashes the running binary (os.Executable) and takes the embedded source
//     hash (package reproducible; 64 zeros in a development build);
//  4. generates the HPKE key set (package keys) and an Ed25519 receipt key
//     from crypto/rand, in memory only, and a 32-byte boot nonce;
//  5. collects GPU evidence once, requested with the statement's GPU nonce
//     (attest.Statement.GPUNonce: derived from the keys and the boot nonce):
//     NVML's CC attestation report and attestation certificate chain per GPU
//     (package enclave/nvml, loaded with dlopen). A GPU whose CC mode is off is
//     listed (GPUs, cc_mode "off") without evidence: it is not an error here,
//     the verifier's policy decides (the default policy requires at least one
//     GPU with evidence). With the sim TEE the GPU evidence is simulated
//     (Config.SimGPUs GPUs, default 1) unless Config.GPUEvidence says otherwise;
//  6. writes the boot statement and checks that the TEE produces evidence.
//
// Evidence(nonce) then returns a fresh bundle per call: a statement issued now
// that carries the client's nonce, a new TEE quote binding it (REPORTDATA =
// attest.ReportData(statement bytes)), and the boot-time GPU evidence.
// Callers rate-limit it (package enclave/server does).
//
// # Hardening and secrets
//
// Harden disables core dumps (RLIMIT_CORE 0) and marks the process
// non-dumpable (PR_SET_DUMPABLE 0). Keys never leave memory: nothing in this
// package writes or logs them. Close zeroes the receipt key and closes the HPKE
// key set, which wipes what Go lets it wipe; copies inside the Go standard
// library's key types and any the garbage collector made remain until the
// memory is reused (package keys documents this). The TEE's memory encryption,
// not Close, is what protects them from the host.
//
// # What is faked in tests
//
// The TDX collection test runs ConfigFSTEE over go-configfs-tsm's fake
// configfs (faketsm) whose "outblob" is a recorded real TDX quote with the
// requested REPORTDATA patched in (so its signature no longer verifies: the
// test checks collection and binding, not Intel's signature). Simulated
// evidence is real attest/sim evidence under the public simulation root.
// NVML is tested against the machine's real library when present; on a machine
// without a GPU driver Open reports *nvml.UnavailableError.
//
// # What is not done
//
// Azure-style vTPM evidence (tdx-vtpm) is verified by package attest but not
// collected here: --tee tpm fails with an error saying so. GPU reference
// manifests (RIMs) are not fetched; verifiers use their offline cache.
package enclave
