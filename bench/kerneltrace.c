/*
 * kerneltrace: the GPU time of every kernel a process launches between cuProfilerStart and
 * cuProfilerStop, recorded with CUPTI's Activity API and written as CSV. It stands in for ncu where
 * ncu cannot run the process (`ncu --profile-from-start off` crashed the Go bench before its profile
 * window), and unlike ncu it times kernels as they run, concurrently and without replay.
 *
 * Build on the GPU machine (bench/profile_h3dit.sh does this, finding CUPTI itself):
 *   gcc -shared -fPIC -O2 -Wall -I$CUPTI_INCLUDE -I/usr/local/cuda/include bench/kerneltrace.c \
 *       -o /tmp/kerneltrace.so -ldl -lpthread
 * Run:
 *   CUDA_INJECTION64_PATH=/tmp/kerneltrace.so KERNELTRACE_OUT=trace.csv \
 *   KERNELTRACE_CUPTI=/path/to/libcupti.so.13 .gpu/bench -what h3dit ... -profile-window TAG
 *
 * Environment:
 *   KERNELTRACE_OUT    the CSV to write (required: without it nothing is traced).
 *   KERNELTRACE_CUPTI  libcupti to load (else "libcupti.so", ".so.13", ".so.12" on the loader path).
 *   KERNELTRACE_ALL=1  record every kernel from cuInit on, not only the profiler windows.
 *
 * Why CUDA_INJECTION64_PATH and not LD_PRELOAD: the driver loads the library and calls
 * InitializeInjection from cuInit, so it acts only in processes that use CUDA, and it is set up
 * before the first context and kernel. LD_PRELOAD would also load it into every child process
 * (the bench runs nvidia-smi to poll memory) and run its set-up before the program's own start.
 * ncu and nsys use the same variable, so this tracer and they cannot run in one process.
 *
 * When the CSV is written: at every cuProfilerStop (all rows recorded so far), and at exit(3) when
 * rows were added since. A Go program leaves through the exit_group system call, never running
 * atexit handlers: for Go, only what a cuProfilerStop wrote survives.
 *
 * CSV columns: name (demangled when libstdc++'s __cxa_demangle is at hand), start_ns, end_ns,
 * duration_ns (CUPTI's GPU timestamps), device, stream, correlation, grid_x..z, block_x..z.
 */
#define _GNU_SOURCE
#include <cupti.h>
#include <cupti_version.h> /* cupti.h includes it too; named for cuptiGetVersion */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Every kernel record CUPTI has written since CUDA 9 (CUpti_ActivityKernel4, ..., Kernel9 in CUDA 12,
 * Kernel10 in 13.0, Kernel11/12 in 13.2/13.3) begins with the same fields up to and including
 * `name`; later versions only append. Only those fields are read, through Kernel4, which the 12.x
 * and 13.x headers still declare (as deprecated), so one source builds against either header and
 * reads the records of whichever libcupti version is loaded at run time.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
typedef CUpti_ActivityKernel4 kt_kernel_record;
#define KT_SAME_OFFSET(T, f) _Static_assert(offsetof(T, f) == offsetof(kt_kernel_record, f), #T "." #f " moved")
#define KT_SAME_PREFIX(T)                                                                           \
	KT_SAME_OFFSET(T, start);                                                                   \
	KT_SAME_OFFSET(T, end);                                                                     \
	KT_SAME_OFFSET(T, deviceId);                                                                \
	KT_SAME_OFFSET(T, streamId);                                                                \
	KT_SAME_OFFSET(T, gridX);                                                                   \
	KT_SAME_OFFSET(T, blockZ);                                                                  \
	KT_SAME_OFFSET(T, correlationId);                                                           \
	KT_SAME_OFFSET(T, name)
#if defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 130000
KT_SAME_PREFIX(CUpti_ActivityKernel10); /* the record CUDA 13.0 writes */
#elif defined(CUPTI_API_VERSION) && CUPTI_API_VERSION >= 19
KT_SAME_PREFIX(CUpti_ActivityKernel9); /* the record CUDA 12 writes */
#endif
#pragma GCC diagnostic pop

/* CUPTI is opened at run time so that a machine without it gets a message, not a failed cuInit. */
#define KT_CUPTI_FUNCS(X)                                                                           \
	X(cuptiGetVersion)                                                                          \
	X(cuptiGetResultString)                                                                     \
	X(cuptiSubscribe)                                                                           \
	X(cuptiEnableCallback)                                                                      \
	X(cuptiActivityEnable)                                                                      \
	X(cuptiActivityRegisterCallbacks)                                                           \
	X(cuptiActivityFlushAll)                                                                    \
	X(cuptiActivityGetNextRecord)                                                               \
	X(cuptiActivityGetNumDroppedRecords)                                                        \
	X(cuptiGetTimestamp)
#define KT_DECLARE(f) static __typeof__(f) *kt_##f;
KT_CUPTI_FUNCS(KT_DECLARE)

#define KT_BUFFER_BYTES (8u << 20)
#define KT_MAX_WINDOWS 64

typedef struct {
	char *name;
	uint64_t start, end;
	uint32_t device, stream, correlation;
	int32_t grid[3], block[3];
} kt_row;

static struct {
	pthread_mutex_t mu; /* guards everything below: CUPTI completes buffers on its own thread */
	kt_row *rows;
	size_t n, cap, lost, dropped;
	size_t written_n; /* the kept rows the file holds */
	int written;
	uint64_t win_start[KT_MAX_WINDOWS], win_end[KT_MAX_WINDOWS];
	int windows;
} kt = {.mu = PTHREAD_MUTEX_INITIALIZER};

static const char *kt_out;
static int kt_all, kt_ready;

static void kt_say(const char *what) { fprintf(stderr, "kerneltrace: %s\n", what); }

static const char *kt_error(CUptiResult r) {
	const char *s = NULL;
	if (kt_cuptiGetResultString == NULL || kt_cuptiGetResultString(r, &s) != CUPTI_SUCCESS || s == NULL)
		return "unknown CUPTI error";
	return s;
}

static int kt_check(CUptiResult r, const char *call) {
	if (r == CUPTI_SUCCESS) return 0;
	fprintf(stderr, "kerneltrace: %s failed: %s (%d)\n", call, kt_error(r), (int)r);
	return -1;
}

static void *kt_open_cupti(void) {
	const char *path = getenv("KERNELTRACE_CUPTI");
	if (path != NULL && *path != '\0') return dlopen(path, RTLD_NOW | RTLD_LOCAL);
	static const char *names[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (lib != NULL) return lib;
	}
	return NULL;
}

/* kt_load_cupti resolves the CUPTI entry points; -1 (and a message) when CUPTI is not there. */
static int kt_load_cupti(void) {
	void *lib = kt_open_cupti();
	if (lib == NULL) {
		fprintf(stderr, "kerneltrace: CUPTI not found (%s); set KERNELTRACE_CUPTI to libcupti.so's path. "
				"Nothing is traced.\n", dlerror());
		return -1;
	}
#define KT_RESOLVE(f)                                                                               \
	if ((kt_##f = (__typeof__(f) *)dlsym(lib, #f)) == NULL) {                                   \
		kt_say("the loaded libcupti lacks " #f "; nothing is traced");                      \
		return -1;                                                                          \
	}
	KT_CUPTI_FUNCS(KT_RESOLVE)
#undef KT_RESOLVE
	return 0;
}

static void CUPTIAPI kt_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
	*max_records = 0;
	*buffer = aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, KT_BUFFER_BYTES);
	*size = *buffer == NULL ? 0 : KT_BUFFER_BYTES;
	if (*buffer == NULL) kt_say("out of memory for an activity buffer: CUPTI drops its records");
}

/* kt_kept says whether a row falls in a profiler window (every row under KERNELTRACE_ALL). */
static int kt_kept(const kt_row *r) {
	if (kt_all) return 1;
	for (int i = 0; i < kt.windows; i++)
		if (r->start >= kt.win_start[i] && r->start <= kt.win_end[i]) return 1;
	return 0;
}

/* kt_append adds one kernel record when it lies in a window; called with kt.mu held. A kernel's
 * record comes after the kernel ran, so the window it started in is already known. */
static void kt_append(const kt_kernel_record *k) {
	if (kt.n == kt.cap) {
		size_t cap = kt.cap ? 2 * kt.cap : 4096;
		kt_row *rows = realloc(kt.rows, cap * sizeof *rows);
		if (rows == NULL) {
			kt.lost++;
			return;
		}
		kt.rows = rows;
		kt.cap = cap;
	}
	kt_row *r = &kt.rows[kt.n];
	r->start = k->start;
	if (!kt_kept(r)) return;
	r->name = strdup(k->name != NULL ? k->name : "?");
	if (r->name == NULL) {
		kt.lost++;
		return;
	}
	r->end = k->end;
	r->device = k->deviceId;
	r->stream = k->streamId;
	r->correlation = k->correlationId;
	r->grid[0] = k->gridX, r->grid[1] = k->gridY, r->grid[2] = k->gridZ;
	r->block[0] = k->blockX, r->block[1] = k->blockY, r->block[2] = k->blockZ;
	kt.n++;
}

static void CUPTIAPI kt_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
					 size_t valid) {
	CUpti_Activity *rec = NULL;
	size_t dropped = 0;
	(void)size;
	pthread_mutex_lock(&kt.mu);
	while (valid > 0 && kt_cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
		if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || rec->kind == CUPTI_ACTIVITY_KIND_KERNEL)
			kt_append((const kt_kernel_record *)rec);
	}
	if (kt_cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS) kt.dropped += dropped;
	pthread_mutex_unlock(&kt.mu);
	free(buffer);
}

typedef char *(*kt_demangler)(const char *, char *, size_t *, int *);

/* kt_demangle returns the demangled name (malloc'ed) or NULL: XLA's fusions and cuBLAS's nvjet
 * kernels carry plain names, only C++ templates (cutlass, cuDNN) come mangled. */
static char *kt_demangle(const char *name) {
	static kt_demangler fn;
	static int looked;
	if (strncmp(name, "_Z", 2) != 0) return NULL;
	if (!looked) {
		looked = 1;
		fn = (kt_demangler)dlsym(RTLD_DEFAULT, "__cxa_demangle");
		void *cxx = fn == NULL ? dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL) : NULL;
		if (cxx != NULL) fn = (kt_demangler)dlsym(cxx, "__cxa_demangle");
	}
	int status = -1;
	char *out = fn != NULL ? fn(name, NULL, NULL, &status) : NULL;
	if (status != 0) {
		free(out);
		return NULL;
	}
	return out;
}

static void kt_put_csv_name(FILE *f, const char *name) {
	char *pretty = kt_demangle(name);
	fputc('"', f);
	for (const char *c = pretty != NULL ? pretty : name; *c; c++) {
		if (*c == '"') fputc('"', f);
		fputc(*c, f);
	}
	fputc('"', f);
	free(pretty);
}

/* kt_write_rows writes the kept rows to path; returns how many, -1 when the file failed. */
static long kt_write_rows(const char *path, double *sum_ms, double *span_ms) {
	FILE *f = fopen(path, "w");
	if (f == NULL) return -1;
	fputs("name,start_ns,end_ns,duration_ns,device,stream,correlation,grid_x,grid_y,grid_z,block_x,block_y,block_z\n", f);
	long n = 0;
	uint64_t first = UINT64_MAX, last = 0, sum = 0;
	for (size_t i = 0; i < kt.n; i++) {
		const kt_row *r = &kt.rows[i];
		if (!kt_kept(r)) continue;
		uint64_t d = r->end > r->start ? r->end - r->start : 0;
		kt_put_csv_name(f, r->name);
		fprintf(f, ",%llu,%llu,%llu,%u,%u,%u,%d,%d,%d,%d,%d,%d\n", (unsigned long long)r->start,
			(unsigned long long)r->end, (unsigned long long)d, r->device, r->stream, r->correlation,
			r->grid[0], r->grid[1], r->grid[2], r->block[0], r->block[1], r->block[2]);
		n++, sum += d;
		if (r->start < first) first = r->start;
		if (r->end > last) last = r->end;
	}
	*sum_ms = sum / 1e6;
	*span_ms = n > 0 && last > first ? (last - first) / 1e6 : 0;
	return fclose(f) == 0 ? n : -1;
}

/* kt_write (re)writes $KERNELTRACE_OUT with every row recorded so far, through a temporary file so
 * that a reader never sees half a table; when is the event that asked for it. */
static void kt_write(const char *when) {
	pthread_mutex_lock(&kt.mu);
	size_t kept = 0;
	for (size_t i = 0; i < kt.n; i++) kept += kt_kept(&kt.rows[i]);
	if (kt.written && kept == kt.written_n) {
		pthread_mutex_unlock(&kt.mu);
		return;
	}
	char tmp[4096];
	double sum_ms = 0, span_ms = 0;
	snprintf(tmp, sizeof tmp, "%s.tmp", kt_out);
	long n = kt_write_rows(tmp, &sum_ms, &span_ms);
	if (n < 0) {
		fprintf(stderr, "kerneltrace: at %s: cannot write %s\n", when, tmp);
	} else if (n == 0) {
		remove(tmp);
		fprintf(stderr, "kerneltrace: at %s: no kernel recorded%s; %s not written\n", when,
			kt_all ? "" : " inside a cuProfilerStart/cuProfilerStop window", kt_out);
	} else if (rename(tmp, kt_out) != 0) {
		fprintf(stderr, "kerneltrace: at %s: cannot rename %s to %s\n", when, tmp, kt_out);
	} else {
		fprintf(stderr, "kerneltrace: at %s: %ld kernels, %.3f ms of kernel time over a %.3f ms span "
				"(%zu records dropped by CUPTI, %zu lost here) -> %s\n",
			when, n, sum_ms, span_ms, kt.dropped, kt.lost, kt_out);
	}
	kt.written = 1;
	kt.written_n = kept;
	pthread_mutex_unlock(&kt.mu);
}

static void kt_enable_activity(void) {
	kt_check(kt_cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
		 "cuptiActivityEnable(CONCURRENT_KERNEL)");
}

/* kt_sync_context waits for the calling thread's context, so that the window's last kernels have
 * finished and their records can be flushed (the caller's forward normally synchronized already). */
static void kt_sync_context(void) {
	static CUresult (*sync)(void);
	static int looked;
	if (!looked) {
		looked = 1;
		void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
		if (cuda != NULL) sync = (CUresult(*)(void))dlsym(cuda, "cuCtxSynchronize");
	}
	if (sync != NULL) sync();
}

static void kt_window_open(void) {
	uint64_t t = 0;
	kt_cuptiGetTimestamp(&t);
	pthread_mutex_lock(&kt.mu);
	if (kt.windows > 0 && kt.win_end[kt.windows - 1] == UINT64_MAX) {
		/* a second cuProfilerStart before the stop: the open window goes on */
	} else if (kt.windows < KT_MAX_WINDOWS) {
		kt.win_start[kt.windows] = t;
		kt.win_end[kt.windows] = UINT64_MAX;
		kt.windows++;
	} else {
		kt_say("too many profiler windows; this one is not recorded");
	}
	pthread_mutex_unlock(&kt.mu);
}

static void kt_window_close(void) {
	uint64_t t = 0;
	kt_sync_context();
	kt_cuptiGetTimestamp(&t);
	pthread_mutex_lock(&kt.mu);
	if (kt.windows > 0 && kt.win_end[kt.windows - 1] == UINT64_MAX) kt.win_end[kt.windows - 1] = t;
	pthread_mutex_unlock(&kt.mu);
	/* The flush calls kt_buffer_completed on this thread: kt.mu must not be held here. */
	kt_check(kt_cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
	kt_write("cuProfilerStop");
}

static void CUPTIAPI kt_api_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
				     const void *data) {
	const CUpti_CallbackData *call = data;
	(void)userdata;
	if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
	/* Open after cuProfilerStart returned, close before cuProfilerStop runs: neither call's own
	 * work (nor this library's synchronization) lies inside the window. */
	if (cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStart && call->callbackSite == CUPTI_API_EXIT)
		kt_window_open();
	else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuProfilerStop && call->callbackSite == CUPTI_API_ENTER)
		kt_window_close();
}

static void kt_at_exit(void) {
	if (!kt_ready) return;
	kt_check(kt_cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll at exit");
	kt_write("exit");
}

/* kt_subscribe asks for the profiler start/stop callbacks; -1 when CUPTI refuses (another tool,
 * e.g. a profiler inside the process, may already be its one subscriber). */
static int kt_subscribe(void) {
	CUpti_SubscriberHandle sub;
	if (kt_check(kt_cuptiSubscribe(&sub, (CUpti_CallbackFunc)kt_api_callback, NULL), "cuptiSubscribe")) return -1;
	if (kt_check(kt_cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart),
		     "cuptiEnableCallback(cuProfilerStart)") ||
	    kt_check(kt_cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop),
		     "cuptiEnableCallback(cuProfilerStop)"))
		return -1;
	return 0;
}

static void kt_init(void) {
	const char *all = getenv("KERNELTRACE_ALL");
	kt_out = getenv("KERNELTRACE_OUT");
	kt_all = all != NULL && *all != '\0' && strcmp(all, "0") != 0;
	if (kt_out == NULL || *kt_out == '\0') {
		kt_say("KERNELTRACE_OUT is not set; nothing is traced");
		return;
	}
	if (kt_load_cupti() != 0) return;
	if (kt_check(kt_cuptiActivityRegisterCallbacks(kt_buffer_requested, kt_buffer_completed),
		     "cuptiActivityRegisterCallbacks"))
		return;
	if (kt_subscribe() != 0 && !kt_all) {
		kt_say("without the profiler callbacks there is no window to record; nothing is traced");
		return;
	}
	uint32_t version = 0;
	kt_cuptiGetVersion(&version);
	kt_ready = 1;
	/* Kernel tracing starts here, not at the first window: kernels of CUDA graphs (XLA's command
	 * buffers) instantiated before tracing was enabled may never be reported. The windows then
	 * select the rows; the tracing overhead reaches every run of the process (the bench's timed
	 * medians under the tracer are not the ones to quote). */
	kt_enable_activity();
	atexit(kt_at_exit);
	fprintf(stderr, "kerneltrace: CUPTI API version %u; recording %s; the CSV goes to %s\n", version,
		kt_all ? "every kernel" : "the kernels between cuProfilerStart and cuProfilerStop", kt_out);
}

/* InitializeInjection is what the CUDA driver calls, from cuInit, in the library named by
 * CUDA_INJECTION64_PATH. */
int InitializeInjection(void) {
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, kt_init);
	return 1;
}
