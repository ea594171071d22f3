// Package tdx verifies Intel TDX quotes (DCAP, ECDSA P-256) and turns them
// into [Claims] for the appraisal policy.
//
// # Formats
//
// Quote versions 4 and 5 are parsed here with named byte offsets (quote.go):
// v4 carries a TDX 1.0 TD report body (584 bytes); v5 a body descriptor
// (type 2: TDX 1.0 body, type 3: TDX 1.5 body of 648 bytes adding
// TEE_TCB_SVN2 and MRSERVICETD). github.com/google/go-tdx-guest at the pinned
// version parses v4 only, so v5 has no library path; the signature data that
// follows the body is the same in both versions. Parsing is strict: every
// length field must match the bytes present, the PCK chain must be exactly
// three certificates in canonical PEM, and only zero padding may follow the
// signature data (real quotes from configfs-tsm come zero-padded to the
// buffer size). So every byte of an accepted quote is either covered by a
// signature or a hash, or pinned to one canonical value.
//
// # What Verify checks
//
// In order, each a [check.Check] in the returned list:
//
//   - tdx.quote.structure: the parse above.
//   - tdx.pck.chain: PCK leaf <- PCK Platform/Processor CA <- the embedded
//     Intel SGX Root CA (byte-identical to the quote's root), valid at AsOf.
//   - tdx.quote.signature: the attestation key signs header and body.
//   - tdx.qe_report.signature: the PCK key signs the QE report.
//   - tdx.qe_report.binding: QE REPORTDATA = SHA-256(attestation key || QE
//     auth data) || 32 zero bytes.
//   - tdx.collateral.validity: every collateral item is valid at AsOf.
//   - tdx.crl.root_ca, tdx.crl.pck: CRL signatures and validity, and that
//     the PCK CA, TCB signing and PCK certificates are not revoked (skipped
//     when the collateral has no CRL).
//   - tdx.tcb_info.signature, tdx.qe_identity.signature: signed by the Intel
//     SGX TCB Signing certificate, which must chain to the embedded root.
//   - tdx.tcb_info.platform: the TCB info is for the PCK's FMSPC and PCEID.
//   - tdx.tcb.tdx_module: MRSIGNERSEAM and SEAMATTRIBUTES match.
//   - tdx.tcb.level: the matching TCB level ("no matching TCB level" when
//     the collateral has none for this platform's SVNs). Its status (UpToDate,
//     OutOfDate, …) becomes a claim: allowing statuses is policy, not here.
//   - tdx.qe_identity.match: QE MRSIGNER, ISVPRODID, MISCSELECT and
//     ATTRIBUTES match the TD_QE identity; its TCB status becomes a claim.
//   - tdx.go_tdx_guest: for v4, go-tdx-guest's verify.TdxQuote run on the
//     same quote, collateral, root and time as a second opinion (with the
//     collateral only when all statuses are UpToDate, since it rejects any
//     other status).
//   - tdx.td.debug: the TD debug attribute is off (fails otherwise).
//   - tdx.td.report_data: REPORTDATA equals Options.ReportData (skipped when
//     none is given).
//
// Not checked here: MRTD, RTMRs, MRCONFIGID, MROWNER, minimum SVNs and
// allowed TCB statuses are claims that the policy package appraises; the
// statement behind REPORTDATA is the caller's to hash.
//
// # Outcomes
//
// Verify returns *check.ParseError for unusable input (claims nil),
// *check.VerifyError when any check failed (rejected), and
// *check.UnavailableError when every check that ran passed but collateral
// could not be had (could not check: neither pass nor reject).
//
// # Collateral
//
// Collateral comes from an offline file ([ParseCollateral]: our
// [CollateralFile] JSON or the Polaris receipts' format) or from Intel PCS v4
// ([PCS]), which caches each response on disk until its nextUpdate. Time,
// network (a go-tdx-guest getter) and cache directory are injected.
//
// go-tdx-guest's package logger writes to standard output; its only
// unconditional message is a warning when no trusted roots are passed, and
// this package always passes the embedded root, so nothing is written.
package tdx
