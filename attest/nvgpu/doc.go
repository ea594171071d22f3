// Package nvgpu verifies NVIDIA GPU confidential-computing attestation
// evidence (Hopper and Blackwell) locally, with no NVIDIA service.
//
// # Evidence
//
// A report, as nvmlDeviceGetConfComputeGpuAttestationReport returns it, is an
// SPDM 1.1 GET_MEASUREMENTS request (37 bytes; the verifier's 32-byte nonce at
// bytes 4..35) followed by the MEASUREMENTS response: a record of DMTF
// measurement blocks (index, spec, value type, SHA-384 digest), the
// responder's nonce, NVIDIA opaque data (type/size/data items: driver and VBIOS
// versions, chip and board identifiers, measurement counts, NVDEC0 status,
// FWID, feature flag, ...) and a 96-byte raw r||s ECDSA P-384 signature over
// SHA-384 of everything before it. The certificate chain (PEM, leaf first)
// runs from the per-boot "GSP FMC LF" leaf to the NVIDIA Device Identity CA.
//
// # What Verify checks
//
//   - the report parses strictly (lengths, DMTF blocks, known and unique
//     opaque fields, nothing after the signature);
//   - the chain: at least leaf and root, ending byte-for-byte at the embedded
//     NVIDIA Device Identity CA, each certificate signed by the next, all valid
//     at Options.AsOf, and crypto/x509 path validation (see verifyChain);
//   - the report signature with the leaf's P-384 key;
//   - the request nonce against Options.Nonce (skipped when none is given);
//   - the FWID of the leaf's TCG DICE TcbInfo extension against the report's
//     FWID opaque field (id 20), as NVIDIA's verifier does; both real reports
//     carry the field;
//   - OCSP revocation of the intermediates when Options.HTTPClient is set,
//     otherwise an explicit "skipped: offline";
//   - with Options.RIMDir: the driver and VBIOS RIMs named by the report
//     (signed SWID tags; XML signature, digest and chain to the embedded NVIDIA
//     CoRIM signing Root CA as of the RIM signer's issuance), and every active
//     golden measurement against the report's blocks.
//
// # What it does not check
//
//   - CC mode and dev-tools mode: NVIDIA's opaque data has no field for
//     either; Claims says "unknown" and the checks are skipped. The modes
//     change measurements, so a full RIM match is what binds them.
//   - CRLs (only OCSP), OCSP nonces, and the meaning of opaque fields other
//     than those decoded above (they are exposed raw, hex).
//   - That the driver and VBIOS versions are current or unrevoked: policy.
package nvgpu
