package fastvideo

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultOutputPath is where Generate writes when Request.OutputPath is empty (FastVideo's
// "outputs/"): a folder, the file named after the prompt.
const DefaultOutputPath = "outputs/"

const videoExt = ".mp4"

// outputTarget resolves Request.OutputPath: a path ending in .mp4 (any case) is the file; an
// existing folder, a path ending in a separator or a path without an extension is a folder in
// which the file is named after the prompt; any other extension is invalid input (a typo such as
// clip.txt would otherwise become a folder). The folder is created and must be writable: both are
// checked now, before anything loads. An existing file is never overwritten: the name gets _1, _2,
// ... before the extension.
func outputTarget(outputPath, prompt string) (string, error) {
	p := outputPath
	if p == "" {
		p = DefaultOutputPath
	}
	bad := func(allowed string) error {
		return &RequestError{Field: "output_path", Value: outputPath, Allowed: allowed}
	}
	st, statErr := os.Stat(p)
	isDir := statErr == nil && st.IsDir()
	folderSyntax := strings.HasSuffix(p, string(filepath.Separator)) || strings.HasSuffix(p, "/")
	ext := filepath.Ext(p)
	dir, name := p, ""
	switch {
	case isDir || folderSyntax || ext == "":
		name = fileNameFromPrompt(prompt) + videoExt
	case !strings.EqualFold(ext, videoExt):
		return "", bad(fmt.Sprintf("a file path ending in %s, or a folder (%q is neither)", videoExt, ext))
	case statErr == nil && !st.Mode().IsRegular():
		return "", bad("a regular .mp4 file path or a folder (this path exists and is neither)")
	default:
		dir, name = filepath.Dir(p), filepath.Base(p)
	}
	if err := checkCreatableDir(dir); err != nil {
		return "", bad(fmt.Sprintf("a folder this process can create and write in (%v)", err))
	}
	abs, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		return "", bad(fmt.Sprintf("a valid path (%v)", err))
	}
	return freeName(abs)
}

// freeName returns path, or the first of path_1, path_2, ... (suffix before the extension) that
// does not exist.
func freeName(path string) (string, error) {
	ext := filepath.Ext(path)
	stem := strings.TrimSuffix(path, ext)
	for i := 0; i < 100000; i++ {
		p := path
		if i > 0 {
			p = fmt.Sprintf("%s_%d%s", stem, i, ext)
		}
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			return p, nil
		} else if err != nil {
			return "", fmt.Errorf("fastvideo: checking the output path %s: %w", p, err)
		}
	}
	return "", fmt.Errorf("fastvideo: no free output name next to %s", path)
}

// maxNameBytes bounds a file name made from a prompt, in bytes: with the _N suffix of a taken
// name and the hidden staging name around it, it stays far below every file system's 255-byte
// limit, whatever the script of the prompt.
const maxNameBytes = 80

// fileNameFromPrompt makes a clean slug of a prompt for the output name: H3's speech markup
// (speaker tags "(S1)", language tags "[English]", "<d>"/"</d>") is dropped, letters and digits
// of any script are kept (lower case), every other run of characters (spaces, punctuation,
// control and bidirectional-override characters) becomes one "_", and the result is cut to
// maxNameBytes on a character boundary; "output" when nothing is left.
func fileNameFromPrompt(prompt string) string {
	prompt = promptMarkup.ReplaceAllString(prompt, " ")
	var b strings.Builder
	gap := false
	for _, r := range prompt {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			gap = true
			continue
		}
		r = unicode.ToLower(r)
		if gap && b.Len() > 0 {
			if b.Len()+1+utf8.RuneLen(r) > maxNameBytes {
				break
			}
			b.WriteByte('_')
		}
		if b.Len()+utf8.RuneLen(r) > maxNameBytes {
			break
		}
		gap = false
		b.WriteRune(r)
	}
	if b.Len() == 0 {
		return "output"
	}
	return b.String()
}

// promptMarkup matches H3's speech markup: speaker tags, bracketed language tags and the <d> tags.
var promptMarkup = regexp.MustCompile(`\(S\d+\)|\[[^\]]{0,40}\]|</?[A-Za-z]{1,10}>`)

// placeFile moves a finished file to dst without ever replacing an existing file: a hard link fails
// if dst exists (then the next free name is taken), and the source is removed afterwards. Where
// hard links are not supported the file is renamed after a last existence check. It returns the
// final path.
func placeFile(src, dst string) (string, error) {
	for attempt := 0; attempt < 1000; attempt++ {
		err := os.Link(src, dst)
		if err == nil {
			os.Remove(src)
			return dst, nil
		}
		if errors.Is(err, os.ErrExist) {
			next, ferr := freeName(dst)
			if ferr != nil {
				return "", ferr
			}
			dst = next
			continue
		}
		// No hard links here (some network and FUSE file systems): rename, which is atomic but
		// replaces, so check first.
		if _, serr := os.Lstat(dst); serr == nil {
			next, ferr := freeName(dst)
			if ferr != nil {
				return "", ferr
			}
			dst = next
			continue
		}
		if rerr := os.Rename(src, dst); rerr != nil {
			return "", fmt.Errorf("fastvideo: moving the finished video to %s: %w", dst, rerr)
		}
		return dst, nil
	}
	return "", fmt.Errorf("fastvideo: could not place the finished video next to %s", dst)
}

// stagingPath is a hidden, unique name in dst's folder for the MP4 writer: the writer renames its
// finished file there, and placeFile then gives it its final name.
func stagingPath(dst string) (string, error) {
	var token [6]byte
	if _, err := rand.Read(token[:]); err != nil {
		return "", err
	}
	base := filepath.Base(dst)
	if len(base) > maxNameBytes+len(videoExt) { // a long name given by the caller: keep the hidden name short
		base = base[:maxNameBytes]
	}
	return filepath.Join(filepath.Dir(dst), "."+base+".fastvideo-"+hex.EncodeToString(token[:])+videoExt), nil
}

// checkCreatableDir proves that dir can hold a new file without creating it: dir itself when it
// exists, else its nearest existing ancestor, must be a folder a file can be created in. Nothing is
// left behind, so a request that fails later leaves no folder it made (the run makes it, makeDirs).
func checkCreatableDir(dir string) error {
	probe := dir
	for {
		st, err := os.Stat(probe)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("%s is not a folder", probe)
			}
			return checkWritableDir(probe)
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		parent := filepath.Dir(probe)
		if parent == probe {
			return err
		}
		probe = parent
	}
}

// makeDirs creates dir and its missing parents and returns the folders it created, outermost first,
// for removeDirs to take back after a failed run.
func makeDirs(dir string) ([]string, error) {
	var missing []string
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		missing = append([]string{p}, missing...)
		if filepath.Dir(p) == p {
			break
		}
	}
	return missing, os.MkdirAll(dir, 0o755)
}

// removeDirs removes the folders makeDirs created, innermost first, as long as they are empty.
func removeDirs(made []string) {
	for i := len(made) - 1; i >= 0; i-- {
		if os.Remove(made[i]) != nil {
			return
		}
	}
}
