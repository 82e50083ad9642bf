// Package framefilter holds the built-in frame filters that run between decode and mux
// (family.FrameFilter): the spatial fast mode's PixelFilter (center-crop, OpenCV-exact resize,
// unsharp) and the temporal fast mode's TemporalFilter, which streams a schedule of copied and
// interpolated frames through an Interpolator, the RIFE 4.25 one of internal/rife
// (docs/architecture.md, "How to add ... A frame filter").
package framefilter
