package backend

import (
	"debug/elf"
	"debug/macho"
	"fmt"
	"io"
	"runtime"
	"strings"

	"fastvideo/internal/safefile"
)

// readELFSearchPath returns the raw DT_RUNPATH and DT_RPATH entries of a shared object.
// Only the section headers and the dynamic section are read, so a 400 MB plugin costs nothing.
func readELFSearchPath(path string) ([]string, error) {
	file, err := safefile.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	f, err := elf.NewFile(file)
	if err != nil {
		return nil, err
	}
	var entries []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, err := f.DynString(tag)
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			for _, e := range strings.Split(v, ":") {
				if e != "" {
					entries = append(entries, e)
				}
			}
		}
	}
	return entries, nil
}

// elfMachines is the ELF machine of each architecture we dlopen plugins on.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkLoadable verifies a shared library before dlopen sees it. The dynamic loader maps the
// file and trusts its headers: a truncated download or a file of another kind crashes the
// process with SIGBUS inside dlopen, where no error can name the file. So the file must be
// a regular file of this platform's object format and architecture, whose every segment and
// section lies inside it.
func checkLoadable(path string) error {
	f, err := safefile.Open(path)
	if err != nil {
		return fmt.Errorf("library %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("library %s: %w", path, err)
	}
	check := checkELF
	if runtime.GOOS == "darwin" {
		check = checkMachO
	}
	if err := check(f, st.Size()); err != nil {
		return fmt.Errorf("library %s cannot be loaded: %v (a truncated download or not a library; replace the file)", path, err)
	}
	return nil
}

// within reports whether [off, off+n) lies inside a size-byte file, without wrapping.
func within(off, n uint64, size int64) bool {
	return off <= uint64(size) && n <= uint64(size)-off
}

func checkELF(r io.ReaderAt, size int64) error {
	var magic [4]byte
	if _, err := r.ReadAt(magic[:], 0); err != nil || string(magic[:]) != elf.ELFMAG {
		return fmt.Errorf("not an ELF file (%d bytes, it starts %q)", size, magic[:min(int(size), 4)])
	}
	ef, err := elf.NewFile(r)
	if err != nil {
		return fmt.Errorf("a corrupt or truncated ELF file: %v", err)
	}
	if ef.Class != elf.ELFCLASS64 {
		return fmt.Errorf("a %v ELF file; a 64-bit library is needed", ef.Class)
	}
	if want, ok := elfMachines[runtime.GOARCH]; ok && ef.Machine != want {
		return fmt.Errorf("built for %v, this machine is %v (%s)", ef.Machine, want, runtime.GOARCH)
	}
	for i, p := range ef.Progs {
		if !within(p.Off, p.Filesz, size) {
			return fmt.Errorf("truncated: segment %d needs bytes %d..%d of a %d-byte file", i, p.Off, p.Off+p.Filesz, size)
		}
	}
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_NOBITS && !within(s.Offset, s.Size, size) {
			return fmt.Errorf("truncated: section %q needs bytes %d..%d of a %d-byte file", s.Name, s.Offset, s.Offset+s.Size, size)
		}
	}
	return nil
}

// machoCPUs is the Mach-O CPU type of each architecture.
var machoCPUs = map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}

func checkMachO(r io.ReaderAt, size int64) error {
	mf, err := macho.NewFile(r)
	if err != nil {
		return fmt.Errorf("not a (thin, 64-bit) Mach-O file: %v", err)
	}
	if want, ok := machoCPUs[runtime.GOARCH]; ok && mf.Cpu != want {
		return fmt.Errorf("built for %v, this machine is %v", mf.Cpu, want)
	}
	for _, l := range mf.Loads {
		if s, ok := l.(*macho.Segment); ok && !within(s.Offset, s.Filesz, size) {
			return fmt.Errorf("truncated: segment %q needs bytes %d..%d of a %d-byte file", s.Name, s.Offset, s.Offset+s.Filesz, size)
		}
	}
	return nil
}
