// shim.h: the C side of enclave/nvml (see shim.c). The NVML types below are
// the subset of nvml.h this package uses, with NVML's layouts.
#ifndef SPARKINFER_NVML_SHIM_H
#define SPARKINFER_NVML_SHIM_H
#include <stddef.h>

typedef void *nv_device;

#define NV_CERT_CHAIN_SIZE 0x1000
#define NV_ATTESTATION_CERT_CHAIN_SIZE 0x1400
#define NV_NONCE_SIZE 0x20
#define NV_ATTESTATION_REPORT_SIZE 0x2000
#define NV_CEC_ATTESTATION_REPORT_SIZE 0x1000

typedef struct {
	unsigned int cpuCaps;
	unsigned int gpusCaps;
} nv_cc_caps;

typedef struct {
	unsigned int environment;
	unsigned int ccFeature;
	unsigned int devToolsMode;
} nv_cc_state;

typedef struct {
	unsigned int certChainSize;
	unsigned int attestationCertChainSize;
	unsigned char certChain[NV_CERT_CHAIN_SIZE];
	unsigned char attestationCertChain[NV_ATTESTATION_CERT_CHAIN_SIZE];
} nv_cc_cert;

typedef struct {
	unsigned int isCecAttestationReportPresent;
	unsigned int attestationReportSize;
	unsigned int cecAttestationReportSize;
	unsigned char nonce[NV_NONCE_SIZE];
	unsigned char attestationReport[NV_ATTESTATION_REPORT_SIZE];
	unsigned char cecAttestationReport[NV_CEC_ATTESTATION_REPORT_SIZE];
} nv_cc_report;

// NV_MISSING is returned by a wrapper whose symbol the library lacks
// (an old driver); NVML's own codes are >= 0.
#define NV_MISSING (-1)

int nv_load(const char *path, char *err, size_t errlen);
const char *nv_error_string(int code);
int nv_init(void);
int nv_shutdown(void);
int nv_driver_version(char *buf, unsigned int n);
int nv_device_count(unsigned int *n);
int nv_device_handle(unsigned int i, nv_device *d);
int nv_device_name(nv_device d, char *buf, unsigned int n);
int nv_device_uuid(nv_device d, char *buf, unsigned int n);
int nv_cc_capabilities(nv_cc_caps *c);
int nv_cc_system_state(nv_cc_state *s);
int nv_get_cc_report(nv_device d, nv_cc_report *r);
int nv_get_cc_certificate(nv_device d, nv_cc_cert *c);

#endif
