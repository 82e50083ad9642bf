// Package backend chooses the compute backend (GoMLX "go" or XLA through a
// PJRT plugin) from one spec string and finds the PJRT plugin on disk, so that
// a user never has to export PJRT_PLUGIN_LIBRARY_PATH, LD_LIBRARY_PATH or
// XLA_FLAGS by hand.
//
// Why this package exists:
//
//   - compute.DefaultConfig is "xla": with GOMLX_BACKEND unset, GoMLX tries to
//     download PJRT plugins from the network and fails. The default here is the
//     pure-Go backend as "go:ops_sequential", because the Go backend deadlocks
//     under its default parallelism on graphs with many independent matmuls
//     (seen with GoMLX v0.28.2's backends/simplego). A bare "go" means the same.
//   - go-xla reads PJRT_PLUGIN_LIBRARY_PATH and GOMLX_NO_AUTO_INSTALL only in
//     package init, so setting them later in-process has no effect. What stops
//     the download for sure is that the xla backend is always given an
//     absolute plugin path (go-xla skips its installer then); GOMLX_NO_AUTO_INSTALL
//     is still set for child processes. A bare "xla" is never handed to GoMLX.
//   - The JAX CUDA wheel's xla_cuda_plugin.so carries an RPATH of
//     $ORIGIN/../../nvidia/<pkg>/lib and dlopens cuBLAS, cuDNN, cudart, NCCL...
//     at run time. When it is loaded from its real path nothing else is needed;
//     symlinking it elsewhere (the old recipe) breaks $ORIGIN and then needs
//     LD_LIBRARY_PATH, which the dynamic loader reads only at process start.
//     So plugins are loaded by their real path, and when the RPATH cannot work
//     (a renamed or relocated plugin, or FASTVIDEO_PJRT_PRELOAD=1) the NVIDIA
//     libraries are preloaded with dlopen(RTLD_NOW|RTLD_GLOBAL) in an order
//     that retries until no more load, so later dlopen calls by soname find them.
//   - go-xla decides "this is CUDA" (TF32 default, cuDNN flash attention,
//     no preallocation) from the plugin path containing "cuda": a plugin whose
//     path lacks it is reached through a symlink named pjrt_c_api_cuda_plugin.so
//     in the user cache directory.
//
// Discovery is a pure function of an environment lookup and a filesystem
// (ResolveWith), so it is tested on fake directory trees; Plan.Open then
// changes the process (env, dlopen) and creates the backend.
package backend
