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
//     (github.com/google/go-sev-guest); "tpm" for an Azure TDX confidential
//     VM's vTPM (see "vTPM evidence"); "sim" for machines without a TEE. With
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
// # vTPM evidence
//
// On an Azure TDX confidential VM the guest does not get TD quotes for its
// own report data: the paravisor ("HCL") holds the TD and gives the guest a
// vTPM instead. VTPMTEE (--tee tpm, OpenVTPM) collects evidence of kind
// tdx-vtpm there, as package attest/tpm verifies it. For report data rd
// (attest.ReportData of the statement) Evidence:
//
//  1. writes rd to NV index 0x01400002 (UserDataNVIndex, defining it — 64
//     bytes, owner and auth read/write — when missing or of another size),
//     which makes the paravisor issue a fresh HCL report carrying rd as its
//     "user-data";
//  2. reads the HCL report from NV index 0x01400001 (HCLReportNVIndex; owner
//     authorization with an empty password as Azure's tools use it, or the
//     index's own where only that is allowed) and parses it with attest/tpm;
//  3. posts its TD report (base64url, JSON {"report": …}) to the instance
//     metadata service (VTPMConfig.IMDSQuoteURL, default
//     http://169.254.169.254/acc/tdquote) and takes the TD quote from the
//     answer's "quote" field;
//  4. has the attestation key at persistent handle 0x81000003 (AKHandle)
//     quote SHA-256 PCRs 0-23 with extraData = rd (TPM2_Quote with the key's
//     own scheme, RSASSA/SHA-256), reads those PCRs and packs signature,
//     TPMS_ATTEST and PCR values into the az-cvm-vtpm container
//     (attest/tpm.ParseTPMQuote); PCRs that change between quote and read
//     are caught by the PCR digest and the quote is retaken (3 attempts);
//  5. checks that the pieces hold together before handing them out: the key
//     at 0x81000003 is the HCLAkPub the HCL report binds, attest/tpm.Verify
//     passes against the TD quote's REPORTDATA and rd (binding, TD report,
//     signature, nonce, PCR digest, go-attestation), and the report's
//     user-data is rd.
//
// The bundle's tee is {kind "tdx-vtpm", quote: the TD quote, hcl_report: the
// NV index's bytes, tpm_quote: the container}. TPM commands go through
// github.com/google/go-tpm (legacy/tpm2, the API go-attestation builds on);
// the device is /dev/tpmrm0, else /dev/tpm0 (VTPMConfig.Device overrides).
// Errors are *TEEError wrapping *NoTPMError, *NVIndexError (Missing: not an
// Azure vTPM), *TPMCommandError, *IMDSError or *VTPMEvidenceError.
//
// "auto" never picks the vTPM. Most machines have a TPM, and a vTPM's
// evidence trusts a different chain (the paravisor signs nothing: the TD
// quote binds the HCL report, which binds the key): choosing that chain
// should be the operator's explicit --tee tpm, not a side effect of which
// devices exist. Where an Azure CVM's guest has no configfs-tsm or
// /dev/tdx_guest, "auto" refuses to start and --tee tpm is the way. SEV-SNP
// CVMs (snp-vtpm) are not collected: the bundle format has no kind for them.
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
// The vTPM collector runs against a real TPM 2.0: go-tpm-tools' simulator
// (Microsoft's reference TPM, cgo, imported only by the tests). The test plays
// the paravisor: it plants a real Azure HCL report in NV index 0x01400001 and
// an attestation key at 0x81000003, and serves the real TD quote from a local
// server in place of the metadata service. The simulator's key is not the
// HCL report's HCLAkPub, so the collected bundle must be, and is, rejected by
// attest.Verify at vtpm.quote.signature; everything else in it verifies. The
// reference TPM caps NV indices at 2048 bytes unless built with
// -DMAX_NV_INDEX_SIZE, so the test re-runs itself in a `go test` with that
// cgo flag (cached after the first build). No real Azure vTPM was exercised:
// the NV attributes, the paravisor's refresh of the report on a user-data
// write and the metadata service's request format follow Microsoft's
// published tools, not a run here.
//
// # What is not done
//
// SEV-SNP vTPM evidence (snp-vtpm) is not collected. GPU reference
// manifests (RIMs) are not fetched; verifiers use their offline cache.
package enclave
