// Package tpm verifies the vTPM evidence of Azure-style confidential VMs
// (TDX or SEV-SNP "CVMs" whose paravisor, the HCL, provides a virtual TPM) and
// turns it into [Claims].
//
// # The chain of trust
//
//  1. The hardware report (a TD quote, or an SEV-SNP report) is verified by
//     attest/tdx or attest/sevsnp. Its REPORTDATA is the only input [Verify]
//     takes on trust, and only once the caller has verified it.
//     [VerifyAzureTDX] does the whole chain for a TDX CVM: it verifies the TD
//     quote with attest/tdx and passes its REPORTDATA on.
//  2. The HCL report ([ParseHCLReport]) binds the vTPM's attestation key:
//     REPORTDATA[0:n] = H(variable data), where H is the hash its header names
//     (SHA-256 in practice, n = 32) and the variable data is the runtime-claims
//     JSON holding the attestation key "HCLAkPub" as an RSA JWK.
//  3. The vTPM quote ([ParseTPMQuote]) is a TPMS_ATTEST signed by that key
//     (RSASSA-PKCS1-v1_5 with SHA-256); its extraData is the verifier's nonce
//     and its PCR digest covers the PCR values shipped with it.
//
// # HCL report layout
//
// All integers little endian. Offsets are derived from the header fields, not
// assumed:
//
//	0x000  attestation header, 32 bytes: signature "HCLA", version (1 or 2),
//	       report_size (bytes of the whole report), request_type, status
//	       (0 = success), 3 reserved words (zero)
//	0x020  hardware report area, 1184 bytes: an SNP report (1184 bytes) or a
//	       TD report (1024 bytes, then zero padding)
//	0x4C0  IGVM request data, 20 bytes: data_size (= 20 + variable data size),
//	       version (1), report_type (2 SNP, 4 TDX), report_data_hash_type
//	       (1 SHA-256, 2 SHA-384, 3 SHA-512), variable_data_size
//	0x4D4  variable data (variable_data_size bytes): the runtime-claims JSON
//
// Bytes after report_size (the TPM NV index is read whole) must be zero.
//
// # What is and is not checked
//
// Checked: the structure above, strictly; the REPORTDATA binding of the
// variable data; that the hardware report embedded in the HCL report carries
// the same REPORTDATA as the verified one; the quote's signature with the
// bound key, its nonce, and its PCR digest against the shipped PCR values
// (both by this package and, as a second implementation, by go-attestation's
// AKPublic.Verify).
//
// Not checked: the embedded hardware report's other fields (the TD report's
// MAC can only be checked on the platform; measurements must be read from the
// verified TD quote or SNP report, never from this copy); the header's
// version and request_type beyond their known values; what the PCR values
// mean (replaying an event log is the policy's or a later step's job); the
// "vm-configuration" claims, which are reported as the HCL states them.
package tpm
