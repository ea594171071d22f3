// Package sevsnp verifies AMD SEV-SNP attestation reports and turns them into
// [Claims] a policy can appraise.
//
// # What is checked
//
// [ParseReport] accepts exactly one raw ATTESTATION_REPORT (1184 bytes, report
// versions 2 to 5, SEV-SNP firmware ABI specification 56860, table
// "ATTESTATION_REPORT structure"). Parsing is strict: every reserved field the
// specification says must be zero is checked (go-sev-guest's abi package), the
// guest policy must have its must-be-one bit set and no unknown bits, the
// signature algorithm must be ECDSA P-384 with SHA-384, the signing key must be
// the VCEK, the VLEK or "none", and the high bytes of the zero-extended R and S
// components of the signature must be zero.
//
// [Verify] then checks, each as its own line of the returned [check.List]:
//
//   - sevsnp.report.signer: the report is signed (SIGNING_KEY is VCEK or VLEK)
//     and a certificate of that kind was supplied;
//   - sevsnp.report.signature: the ECDSA P-384 signature over bytes
//     0x000..0x29F of the report verifies with the V[CL]EK certificate's key;
//   - sevsnp.cert.chain: the certificate has the form the AMD Key Distribution
//     Service specifies and chains, as of [Options.Now], to the AMD root key
//     (ARK) of its product line through the ASK (VCEK) or ASVK (VLEK). The
//     ARK/ASK/ASVK certificates are the ones go-sev-guest embeds; a certificate
//     chain supplied with the evidence is never trusted. The product line
//     (Milan, Genoa, Turin) comes from the report's CPUID fields (report
//     version 3 and later) or from the certificate's product-name extension
//     (version 2);
//   - sevsnp.tcb.cert_binding: the certificate's TCB extensions equal the
//     report's REPORTED_TCB (a certificate for another TCB does not vouch for
//     this report);
//   - sevsnp.chip_id: for a VCEK, the report's CHIP_ID equals the certificate's
//     hardware id (skipped when the host masked the chip id, and for a VLEK,
//     which names no chip);
//   - sevsnp.crl: with an [Options.Getter], the CRL of the intermediate (ASK or
//     ASVK) is fetched from AMD's KDS, its signature checked against the ARK, and
//     neither the intermediate nor the V[CL]EK may be listed. Without a getter
//     the check is "skipped: offline"; a getter that fails gives "skipped:
//     unavailable". A policy decides whether a skipped revocation check is
//     acceptable.
//
// # What is not checked
//
// Verify does not judge the claims: a debug-enabled guest, an old TCB, an
// unexpected measurement or REPORT_DATA all verify. Those are policy decisions
// (see the policy package), taken on the returned [Claims]. The TCB parts of
// [TCBVersion] are decoded with the Milan/Genoa layout; for Turin only the raw
// value is given, since its layout differs and go-sev-guest v0.15.0 does not
// decode it.
//
// # Bytes the signature does not cover
//
// The signature covers bytes 0x000..0x29F. Bytes 0x2A0..0x4A0 hold the
// signature itself: R (72 bytes, little endian, zero-extended from 48) at
// 0x2A0, S likewise at 0x2E8, then 368 reserved bytes at 0x330. A change to R
// or S breaks the signature; a change to the zero extension or to the reserved
// tail is refused by the parser. So no byte of a report can change without the
// report being rejected; the mutation test in this package checks that.
package sevsnp
