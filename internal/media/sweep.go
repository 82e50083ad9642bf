package media

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// stagingNames match the hidden temporary files of our own making in an output folder, and
// nothing a user would name so: the SDK's staging file (fastvideo's stagingPath,
// ".<name>.fastvideo-<12 hex>.mp4"), MP4Writer's part file (".<name>.<12 hex>.part") and its
// audio samples (os.CreateTemp's ".<name>.<digits>.f32le"). ".<name>.<12 hex>.video.part" is
// what the earlier two-pass writer left between its passes; a folder may still hold one from a
// run killed before this version.
var stagingNames = regexp.MustCompile(`^\..+\.(fastvideo-[0-9a-f]{12}\.mp4|[0-9a-f]{12}(\.video)?\.part|[0-9]+\.f32le)$`)

// SweepStaging removes from dir the temporary files of our naming pattern whose last
// modification is older than olderThan: the leftovers of runs killed before they could clean
// up (SIGKILL, a power cut). Younger ones may belong to a run still going and stay. Only
// regular files are removed, never what a symbolic link points at. It returns the paths
// removed; a missing dir is not an error.
func SweepStaging(dir string, olderThan time.Duration) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("media: sweeping %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() || !stagingNames.MatchString(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < olderThan {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("media: sweeping %s: %w", dir, err)
	}
	return removed, nil
}
