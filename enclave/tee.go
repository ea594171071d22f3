package enclave

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/google/go-configfs-tsm/configfs/configfsi"
	"github.com/google/go-configfs-tsm/configfs/linuxtsm"
	"github.com/google/go-configfs-tsm/report"
	sevabi "github.com/google/go-sev-guest/abi"
	sevclient "github.com/google/go-sev-guest/client"
	tdxclient "github.com/google/go-tdx-guest/client"

	"github.com/sparkinfer/cc/attest"
	"github.com/sparkinfer/cc/attest/sevsnp"
	"github.com/sparkinfer/cc/attest/sim"
	"github.com/sparkinfer/cc/attest/tdx"
)

// TEE names accepted by Config.TEE and `sparkinfer serve --tee`.
const (
	TEEAuto   = "auto"
	TEETDX    = "tdx"
	TEESEVSNP = "sev-snp"
	TEETPM    = "tpm"
	TEESim    = "sim"
)

// TEEs lists the accepted TEE names.
var TEEs = []string{TEEAuto, TEETDX, TEESEVSNP, TEETPM, TEESim}

// Paths probed by DetectTEE.
const (
	TSMReportPath = "/sys/kernel/config/tsm/report"
	TDXGuestPath  = "/dev/tdx_guest"
	SEVGuestPath  = "/dev/sev-guest"
)

// A TEE produces evidence binding 64 bytes of report data.
type TEE interface {
	// Kind is the bundle's tee.kind (attest.KindTDX, attest.KindSEVSNP,
	// attest.KindSim).
	Kind() string
	// Evidence returns fresh TEE evidence carrying reportData. It checks that
	// the evidence parses and carries exactly reportData, so a device that
	// answered for other data is caught here rather than by every client.
	Evidence(reportData [64]byte) (attest.TEEEvidence, error)
	// Close releases the device.
	Close() error
}

// NoTEEError means --tee auto found no TEE.
type NoTEEError struct{ Checked []string }

func (e *NoTEEError) Error() string {
	return fmt.Sprintf("no trusted execution environment found (checked %s); to run without one, start with --tee sim (simulated evidence: proves nothing)", strings.Join(e.Checked, ", "))
}

// TEEError is a failure to produce TEE evidence.
type TEEError struct {
	Kind string
	Err  error
}

func (e *TEEError) Error() string { return fmt.Sprintf("%s evidence: %v", e.Kind, e.Err) }
func (e *TEEError) Unwrap() error { return e.Err }

// OpenTEE opens the TEE named name. "auto" probes, in order, configfs-tsm
// (TSMReportPath, TDX or SEV-SNP by its provider), TDXGuestPath and
// SEVGuestPath, and fails with a *NoTEEError naming --tee sim when none
// exists. "tpm" opens an Azure TDX confidential VM's vTPM (OpenVTPM; "auto"
// never picks it).
func OpenTEE(name string) (TEE, error) {
	switch name {
	case TEESim:
		return SimTEE{}, nil
	case TEEAuto:
		if _, err := os.Stat(TSMReportPath); err == nil {
			c, err := linuxtsm.MakeClient()
			if err != nil {
				return nil, &TEEError{Kind: "configfs-tsm", Err: err}
			}
			return NewConfigFSTEE(c, "")
		}
		if _, err := os.Stat(TDXGuestPath); err == nil {
			return openTDXDevice()
		}
		if _, err := os.Stat(SEVGuestPath); err == nil {
			return openSEVDevice()
		}
		return nil, &NoTEEError{Checked: []string{TSMReportPath, TDXGuestPath, SEVGuestPath}}
	case TEETDX, TEESEVSNP:
		kind := attest.KindTDX
		if name == TEESEVSNP {
			kind = attest.KindSEVSNP
		}
		if _, err := os.Stat(TSMReportPath); err == nil {
			c, err := linuxtsm.MakeClient()
			if err != nil {
				return nil, &TEEError{Kind: kind, Err: err}
			}
			return NewConfigFSTEE(c, kind)
		}
		if name == TEETDX {
			return openTDXDevice()
		}
		return openSEVDevice()
	case TEETPM:
		t, err := OpenVTPM(VTPMConfig{})
		if err != nil {
			return nil, err
		}
		return t, nil
	}
	return nil, fmt.Errorf("unknown tee %q (want one of %s)", name, strings.Join(TEEs, ", "))
}

// SimTEE is the simulated TEE (package attest/sim): its quotes are signed by
// the public simulation root and prove nothing. The measurements (MRTD,
// RTMRs) and TEE TCB SVN are zero, debug is off.
type SimTEE struct{}

func (SimTEE) Kind() string { return attest.KindSim }
func (SimTEE) Close() error { return nil }

func (SimTEE) Evidence(rd [64]byte) (attest.TEEEvidence, error) {
	q := sim.SignQuote(sim.PublicRootKey(), &sim.Quote{ReportData: rd})
	return attest.TEEEvidence{Kind: attest.KindSim, Quote: q}, nil
}

// ConfigFSTEE produces TDX quotes or SEV-SNP reports through the Linux
// configfs-tsm report interface (/sys/kernel/config/tsm/report), with
// github.com/google/go-configfs-tsm. Tests pass that module's fake configfs.
type ConfigFSTEE struct {
	client configfsi.Client
	mu     sync.Mutex
	kind   string
}

// NewConfigFSTEE returns a configfs-tsm TEE. With want "" the kind is learned
// from the provider of a first report (tdx_guest or sev_guest); otherwise the
// provider must match want.
func NewConfigFSTEE(c configfsi.Client, want string) (*ConfigFSTEE, error) {
	t := &ConfigFSTEE{client: c, kind: want}
	if want == "" {
		var zero [64]byte
		resp, err := report.Get(c, &report.Request{InBlob: zero[:]})
		if err != nil {
			return nil, &TEEError{Kind: "configfs-tsm", Err: err}
		}
		k, err := providerKind(resp.Provider)
		if err != nil {
			return nil, &TEEError{Kind: "configfs-tsm", Err: err}
		}
		t.kind = k
	}
	return t, nil
}

func providerKind(p string) (string, error) {
	switch strings.TrimSpace(p) {
	case "tdx_guest":
		return attest.KindTDX, nil
	case "sev_guest":
		return attest.KindSEVSNP, nil
	}
	return "", fmt.Errorf("configfs-tsm provider %q is neither tdx_guest nor sev_guest", strings.TrimSpace(p))
}

func (t *ConfigFSTEE) Kind() string { return t.kind }
func (t *ConfigFSTEE) Close() error { return nil }

func (t *ConfigFSTEE) Evidence(rd [64]byte) (attest.TEEEvidence, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	resp, err := report.Get(t.client, &report.Request{InBlob: rd[:], GetAuxBlob: t.kind == attest.KindSEVSNP})
	if err != nil {
		return attest.TEEEvidence{}, &TEEError{Kind: t.kind, Err: err}
	}
	k, err := providerKind(resp.Provider)
	if err != nil {
		return attest.TEEEvidence{}, &TEEError{Kind: t.kind, Err: err}
	}
	if k != t.kind {
		return attest.TEEEvidence{}, &TEEError{Kind: t.kind, Err: fmt.Errorf("configfs-tsm provider is %s", k)}
	}
	if k == attest.KindTDX {
		return tdxEvidence(resp.OutBlob, rd)
	}
	return sevEvidence(resp.OutBlob, resp.AuxBlob, rd)
}

// tdxEvidence checks that quote parses and carries rd.
func tdxEvidence(quote []byte, rd [64]byte) (attest.TEEEvidence, error) {
	q, err := tdx.ParseQuote(quote)
	if err != nil {
		return attest.TEEEvidence{}, &TEEError{Kind: attest.KindTDX, Err: err}
	}
	if !bytes.Equal(q.ReportData(), rd[:]) {
		return attest.TEEEvidence{}, &TEEError{Kind: attest.KindTDX, Err: errors.New("the quote does not carry the requested report data")}
	}
	if len(quote) > attest.MaxQuoteSize {
		return attest.TEEEvidence{}, &TEEError{Kind: attest.KindTDX, Err: fmt.Errorf("quote of %d bytes exceeds %d", len(quote), attest.MaxQuoteSize)}
	}
	return attest.TEEEvidence{Kind: attest.KindTDX, Quote: quote}, nil
}

// sevEvidence checks that the report parses and carries rd, and takes the
// VCEK or VLEK certificate from the extended report's certificate table.
func sevEvidence(raw, certTable []byte, rd [64]byte) (attest.TEEEvidence, error) {
	r, err := sevsnp.ParseReport(raw)
	if err != nil {
		return attest.TEEEvidence{}, &TEEError{Kind: attest.KindSEVSNP, Err: err}
	}
	if !bytes.Equal(r.ReportData(), rd[:]) {
		return attest.TEEEvidence{}, &TEEError{Kind: attest.KindSEVSNP, Err: errors.New("the report does not carry the requested report data")}
	}
	ev := attest.TEEEvidence{Kind: attest.KindSEVSNP, Quote: raw}
	if len(certTable) > 0 {
		var tbl sevabi.CertTable
		if err := tbl.Unmarshal(certTable); err != nil {
			return attest.TEEEvidence{}, &TEEError{Kind: attest.KindSEVSNP, Err: fmt.Errorf("certificate table: %w", err)}
		}
		guid := sevabi.VcekGUID
		if r.Signer() == "vlek" {
			guid = sevabi.VlekGUID
		}
		if c, err := tbl.GetByGUIDString(guid); err == nil {
			ev.Certificates = c
		}
	}
	return ev, nil
}

// tdxDevice produces quotes through /dev/tdx_guest with go-tdx-guest's client.
type tdxDevice struct {
	mu  sync.Mutex
	dev *tdxclient.LinuxDevice
}

func openTDXDevice() (TEE, error) {
	d, err := tdxclient.OpenDevice()
	if err != nil {
		return nil, &TEEError{Kind: attest.KindTDX, Err: err}
	}
	return &tdxDevice{dev: d}, nil
}

func (t *tdxDevice) Kind() string { return attest.KindTDX }
func (t *tdxDevice) Close() error { return t.dev.Close() }

func (t *tdxDevice) Evidence(rd [64]byte) (attest.TEEEvidence, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	q, err := tdxclient.GetRawQuote(t.dev, rd)
	if err != nil {
		return attest.TEEEvidence{}, &TEEError{Kind: attest.KindTDX, Err: err}
	}
	return tdxEvidence(q, rd)
}

// sevDevice produces extended reports through /dev/sev-guest with
// go-sev-guest's client.
type sevDevice struct {
	mu  sync.Mutex
	dev *sevclient.LinuxDevice
}

func openSEVDevice() (TEE, error) {
	d, err := sevclient.OpenDevice()
	if err != nil {
		return nil, &TEEError{Kind: attest.KindSEVSNP, Err: err}
	}
	return &sevDevice{dev: d}, nil
}

func (t *sevDevice) Kind() string { return attest.KindSEVSNP }
func (t *sevDevice) Close() error { return t.dev.Close() }

func (t *sevDevice) Evidence(rd [64]byte) (attest.TEEEvidence, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	raw, certs, err := sevclient.GetRawExtendedReport(t.dev, rd)
	if err != nil {
		return attest.TEEEvidence{}, &TEEError{Kind: attest.KindSEVSNP, Err: err}
	}
	return sevEvidence(raw, certs, rd)
}
