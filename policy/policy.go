// Package policy is the appraisal policy of SparkInfer CC: a documented JSON
// file, and [Evaluate], which appraises the claims of verified evidence
// (package attest) against it and returns a [Verdict] that lists every
// check with pass, fail or skipped and a one-line reason.
//
// # Zero value = enforce
//
// Every field's zero value is the strict choice. An empty policy file
// ({"version":"sparkinfer-policy/v1"}) accepts only hardware evidence (never
// simulated), with debug off, TCB status UpToDate against checked
// collateral, revocation checked, a matching client nonce, evidence at most
// 5 minutes old, at least one GPU with CC on, dev tools off and its RIMs
// matched — and then still fails the measurement and source-hash checks until
// allowlists are given, because nobody can know the right values for you.
// Opt-outs are named allow_… or …_unsafe. docs/POLICY.md lists every field
// with its default.
//
// Debug mode is never allowed, and there is no field to allow it.
//
// # What Evaluate does not do
//
// Evaluate does not check signatures: it appraises claims that
// attest.Verifier.Verify produced. Use [Appraise] to combine both: it
// fails when verification failed, whatever the claims say. As a second
// line of defence Evaluate also fails when the claims themselves say a
// signature or binding was not verified.
package policy

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/sparkinfer/cc/attest"
)

// Version is the version string of the policy format.
const Version = "sparkinfer-policy/v1"

// MaxSize caps a policy file's size.
const MaxSize = 1 << 20

// DefaultMaxEvidenceAge is the evidence age limit when max_evidence_age is
// empty.
const DefaultMaxEvidenceAge = 5 * time.Minute

// TCB statuses as Intel PCS (TDX) names them; AMD evidence is mapped onto
// the same names by package attest.
var tcbStatuses = []string{
	"UpToDate", "SWHardeningNeeded", "ConfigurationNeeded", "ConfigurationAndSWHardeningNeeded",
	"OutOfDate", "OutOfDateConfigurationNeeded",
}

// Policy is the appraisal policy. See docs/POLICY.md for the file format.
type Policy struct {
	// Version must be "sparkinfer-policy/v1".
	Version string `json:"version"`

	// AllowSimulated accepts simulated evidence (package attest/sim).
	// Simulated evidence proves nothing; for development only.
	AllowSimulated bool `json:"allow_simulated"`

	// TEEKinds lists the accepted TEE kinds (tdx, sev-snp, tdx-vtpm).
	// Empty: all hardware kinds. "sim" is governed by AllowSimulated.
	TEEKinds []string `json:"tee_kinds"`

	// AllowedTCBStatuses lists the accepted TCB statuses. Empty: UpToDate
	// only. "Revoked" can never be allowed.
	AllowedTCBStatuses []string `json:"allowed_tcb_statuses"`
	// AllowUncheckedCollateralUnsafe accepts TEE evidence whose TCB could
	// not be appraised against vendor collateral (no collateral offline).
	AllowUncheckedCollateralUnsafe bool `json:"allow_unchecked_collateral_unsafe"`
	// MinTEETCBSVN is the minimum TDX TEE TCB SVN, 16 bytes hex; each
	// byte of the evidence's SVN must be >= the byte here. Empty: no
	// minimum beyond the TCB status.
	MinTEETCBSVN string `json:"min_tee_tcb_svn"`

	// MRTD lists accepted TDX MRTD values (48 bytes hex each). Required for
	// TDX evidence unless AllowAnyMeasurementsUnsafe.
	MRTD []string `json:"mrtd"`
	// RTMR0..RTMR3 list accepted values of each RTMR. An empty list leaves
	// that register unpinned (the check is reported as skipped).
	RTMR0 []string `json:"rtmr0"`
	RTMR1 []string `json:"rtmr1"`
	RTMR2 []string `json:"rtmr2"`
	RTMR3 []string `json:"rtmr3"`
	// SNPMinTCB is the least SEV-SNP TCB accepted, per product line
	// ("Milan", "Genoa"): every part of the report's REPORTED_TCB (the one
	// its VCEK/VLEK certificate vouches for) must be at least the part
	// here. AMD publishes no signed TCB status; this minimum, taken from
	// AMD's security bulletins, is how a policy appraises an SEV-SNP TCB
	// without allow_unchecked_collateral_unsafe. When set, evidence of a
	// product line it does not list is refused.
	SNPMinTCB map[string]attest.SNPTCB `json:"snp_min_tcb"`
	// SNPMeasurements lists accepted SEV-SNP launch measurements (48 bytes
	// hex). Required for sev-snp evidence unless AllowAnyMeasurementsUnsafe.
	SNPMeasurements []string `json:"snp_measurements"`
	// AllowAnyMeasurementsUnsafe accepts any launch measurement: the code
	// in the TEE is then unknown.
	AllowAnyMeasurementsUnsafe bool `json:"allow_any_measurements_unsafe"`

	// SourceHashes lists accepted source hashes (64 hex). Required unless
	// AllowAnySourceHashUnsafe.
	SourceHashes []string `json:"source_hashes"`
	// AllowAnySourceHashUnsafe accepts any source hash.
	AllowAnySourceHashUnsafe bool `json:"allow_any_source_hash_unsafe"`
	// ModelDigests lists accepted model digests (64 hex). Empty: any model
	// (the check is reported as skipped).
	ModelDigests []string `json:"model_digests"`

	// MaxEvidenceAge is the longest accepted time between the statement's
	// issued_at and verification, as a Go duration ("5m", "24h"). Empty:
	// 5m.
	MaxEvidenceAge Duration `json:"max_evidence_age"`
	// AllowNoNonceUnsafe accepts evidence whose freshness was not checked
	// against a client nonce.
	AllowNoNonceUnsafe bool `json:"allow_no_nonce_unsafe"`
	// AllowOfflineRevocationUnsafe accepts certificate chains whose
	// revocation status could not be checked (offline).
	AllowOfflineRevocationUnsafe bool `json:"allow_offline_revocation_unsafe"`

	// MinGPUs is the least number of GPUs. 0 means 1.
	MinGPUs int `json:"min_gpus"`
	// AllowNoGPUsUnsafe accepts evidence without any GPU (CPU-only).
	AllowNoGPUsUnsafe bool `json:"allow_no_gpus_unsafe"`
	// GPUDriverVersions lists accepted GPU driver versions. Empty: any
	// (the check is reported as skipped).
	GPUDriverVersions []string `json:"gpu_driver_versions"`
	// AllowMissingRIMsUnsafe accepts GPU evidence whose measurements were
	// not compared with signed reference manifests (RIMs).
	AllowMissingRIMsUnsafe bool `json:"allow_missing_rims_unsafe"`
}

// Duration is a time.Duration written as a Go duration string in JSON.
type Duration struct{ time.Duration }

// MarshalJSON writes the duration as a string ("" for zero).
func (d Duration) MarshalJSON() ([]byte, error) {
	if d.Duration == 0 {
		return []byte(`""`), nil
	}
	return json.Marshal(d.String())
}

// UnmarshalJSON reads a Go duration string; "" is zero.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"5m\": %w", err)
	}
	if s == "" {
		d.Duration = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// Error is the error type of Decode and Validate: an unusable policy.
type Error struct {
	Field string // the offending field, or "" for the whole file
	Err   error
}

func (e *Error) Error() string {
	if e.Field == "" {
		return "policy: " + e.Err.Error()
	}
	return "policy field " + e.Field + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Decode reads a policy strictly: unknown fields, wrong types, trailing
// data and files over MaxSize are *Error, and so is a policy that does not
// Validate.
func Decode(r io.Reader) (*Policy, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return nil, &Error{Err: err}
	}
	return Parse(data)
}

// Parse is Decode on bytes.
func Parse(data []byte) (*Policy, error) {
	if len(data) > MaxSize {
		return nil, &Error{Err: fmt.Errorf("larger than %d bytes", MaxSize)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, &Error{Field: te.Field, Err: fmt.Errorf("wrong type: %s, want %s", te.Value, te.Type)}
		}
		return nil, &Error{Err: err}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &Error{Err: errors.New("trailing data after the json object")}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks the policy's values.
func (p *Policy) Validate() error {
	if p.Version != Version {
		return &Error{Field: "version", Err: fmt.Errorf("%q, want %q", p.Version, Version)}
	}
	for _, k := range p.TEEKinds {
		if k != "tdx" && k != "sev-snp" && k != "tdx-vtpm" {
			return &Error{Field: "tee_kinds", Err: fmt.Errorf("%q is not one of tdx, sev-snp, tdx-vtpm (simulation is allow_simulated)", k)}
		}
	}
	for _, s := range p.AllowedTCBStatuses {
		if !slices.Contains(tcbStatuses, s) {
			return &Error{Field: "allowed_tcb_statuses", Err: fmt.Errorf("%q is not an allowed tcb status name (one of %v; Revoked is never allowed)", s, tcbStatuses)}
		}
	}
	for prod := range p.SNPMinTCB {
		if !slices.Contains(snpTCBProducts, prod) {
			return &Error{Field: "snp_min_tcb", Err: fmt.Errorf("%q is not a product line whose tcb layout this build decodes (one of %v)", prod, snpTCBProducts)}
		}
	}
	if p.MinTEETCBSVN != "" && !isHex(p.MinTEETCBSVN, 16) {
		return &Error{Field: "min_tee_tcb_svn", Err: fmt.Errorf("%q is not 16 bytes of hex", p.MinTEETCBSVN)}
	}
	for _, l := range []struct {
		name string
		v    []string
		n    int
	}{
		{"mrtd", p.MRTD, 48}, {"rtmr0", p.RTMR0, 48}, {"rtmr1", p.RTMR1, 48}, {"rtmr2", p.RTMR2, 48}, {"rtmr3", p.RTMR3, 48},
		{"snp_measurements", p.SNPMeasurements, 48}, {"source_hashes", p.SourceHashes, 32}, {"model_digests", p.ModelDigests, 32},
	} {
		for _, v := range l.v {
			if !isHex(v, l.n) {
				return &Error{Field: l.name, Err: fmt.Errorf("%q is not %d bytes of hex", v, l.n)}
			}
		}
	}
	if p.MaxEvidenceAge.Duration < 0 {
		return &Error{Field: "max_evidence_age", Err: fmt.Errorf("%s is negative", p.MaxEvidenceAge.Duration)}
	}
	if p.MinGPUs < 0 || p.MinGPUs > 16 {
		return &Error{Field: "min_gpus", Err: fmt.Errorf("%d is not 0 to 16", p.MinGPUs)}
	}
	for _, v := range p.GPUDriverVersions {
		if v == "" || len(v) > 32 {
			return &Error{Field: "gpu_driver_versions", Err: fmt.Errorf("%q is not 1 to 32 characters", v)}
		}
	}
	return nil
}

// snpTCBProducts are the SEV-SNP product lines whose TCB_VERSION layout the
// verifier decodes (Turin's differs and is not decoded).
var snpTCBProducts = []string{"Milan", "Genoa"}

func isHex(s string, n int) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == n
}
