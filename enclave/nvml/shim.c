// shim.c: dlopen/dlsym of libnvidia-ml.so.1 and one C wrapper per NVML entry
// point, so the binary does not link NVML and Go never calls through a
// function pointer itself. Symbols an old driver lacks are optional: their
// wrappers return NV_MISSING.
#include <dlfcn.h>
#include <stdio.h>
#include "shim.h"

static struct {
	int (*init)(void);
	int (*shutdown)(void);
	const char *(*error_string)(int);
	int (*driver_version)(char *, unsigned int);
	int (*device_count)(unsigned int *);
	int (*device_handle)(unsigned int, nv_device *);
	int (*device_name)(nv_device, char *, unsigned int);
	int (*device_uuid)(nv_device, char *, unsigned int);
	int (*cc_capabilities)(nv_cc_caps *);
	int (*cc_system_state)(nv_cc_state *);
	int (*cc_report)(nv_device, nv_cc_report *);
	int (*cc_certificate)(nv_device, nv_cc_cert *);
} nvf;

int nv_load(const char *path, char *err, size_t errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(err, errlen, "%s", dlerror());
		return -1;
	}
#define NVREQ(field, sym) \
	*(void **)(&nvf.field) = dlsym(h, sym); \
	if (!nvf.field) { snprintf(err, errlen, "symbol %s missing", sym); return -1; }
#define NVOPT(field, sym) *(void **)(&nvf.field) = dlsym(h, sym);
	NVREQ(init, "nvmlInit_v2");
	NVREQ(shutdown, "nvmlShutdown");
	NVREQ(error_string, "nvmlErrorString");
	NVREQ(driver_version, "nvmlSystemGetDriverVersion");
	NVREQ(device_count, "nvmlDeviceGetCount_v2");
	NVREQ(device_handle, "nvmlDeviceGetHandleByIndex_v2");
	NVREQ(device_name, "nvmlDeviceGetName");
	NVREQ(device_uuid, "nvmlDeviceGetUUID");
	NVOPT(cc_capabilities, "nvmlSystemGetConfComputeCapabilities");
	NVOPT(cc_system_state, "nvmlSystemGetConfComputeState");
	NVOPT(cc_report, "nvmlDeviceGetConfComputeGpuAttestationReport");
	NVOPT(cc_certificate, "nvmlDeviceGetConfComputeGpuCertificate");
#undef NVREQ
#undef NVOPT
	return 0;
}

const char *nv_error_string(int code) { return nvf.error_string(code); }
int nv_init(void) { return nvf.init(); }
int nv_shutdown(void) { return nvf.shutdown(); }
int nv_driver_version(char *b, unsigned int n) { return nvf.driver_version(b, n); }
int nv_device_count(unsigned int *n) { return nvf.device_count(n); }
int nv_device_handle(unsigned int i, nv_device *d) { return nvf.device_handle(i, d); }
int nv_device_name(nv_device d, char *b, unsigned int n) { return nvf.device_name(d, b, n); }
int nv_device_uuid(nv_device d, char *b, unsigned int n) { return nvf.device_uuid(d, b, n); }
int nv_cc_capabilities(nv_cc_caps *c) { return nvf.cc_capabilities ? nvf.cc_capabilities(c) : NV_MISSING; }
int nv_cc_system_state(nv_cc_state *s) { return nvf.cc_system_state ? nvf.cc_system_state(s) : NV_MISSING; }
int nv_get_cc_report(nv_device d, nv_cc_report *r) { return nvf.cc_report ? nvf.cc_report(d, r) : NV_MISSING; }
int nv_get_cc_certificate(nv_device d, nv_cc_cert *c) { return nvf.cc_certificate ? nvf.cc_certificate(d, c) : NV_MISSING; }
