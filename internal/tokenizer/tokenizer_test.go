package tokenizer

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// extraFixturesEnv names a folder searched (recursively) for more
// *tokenizer*.jsonl case files; it is the project-wide switch of testutil.
const extraFixturesEnv = "FASTVIDEO_EXTRA_FIXTURES"

var (
	qwenDir  = filepath.Join("testdata", "qwen3_tokenizer")
	qwenFile = filepath.Join("qwen3data", "tokenizer.json.gz") // the one copy, which qwen3data embeds
	flagsDir = filepath.Join("testdata", "flags_tokenizer")

	// testCacheDir keeps tests off the user's cache. It is a fixed folder so
	// that fuzz workers, which are killed without running TestMain's cleanup,
	// leave nothing behind but this one bounded cache.
	testCacheDir = filepath.Join(os.TempDir(), "fastvideo-tokenizer-test-cache")

	qwenOnce sync.Once
	qwenTok  *Tokenizer
	qwenErr  error
)

// loadQwen loads the fixture once per test binary (a cold load is ~0.4 s).
func loadQwen(t testing.TB) *Tokenizer {
	t.Helper()
	qwenOnce.Do(func() { qwenTok, qwenErr = LoadWith(qwenFile, Options{CacheDir: testCacheDir}) })
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenTok
}

type tokCase struct {
	Text    string  `json:"text"`
	IDs     []int   `json:"ids"`
	Decoded *string `json:"decoded"` // HF's decode(ids), where the file has it
}

func readCases(t testing.TB, path string) []tokCase {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []tokCase
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var c tokCase
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("%s:%d: %v", path, line, err)
		}
		if c.IDs == nil {
			t.Fatalf("%s:%d: no \"ids\"", path, line)
		}
		out = append(out, c)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no case", path)
	}
	return out
}

// checkCases asserts exact ids, HF's decoded text where known, and, with
// roundTrip, decode(encode(x)) == x for every NFC text (NFC changes other texts
// on the way in, in HF as here). The synthetic flags tokenizer opts out: its
// lstrip/rstrip tokens swallow white space by design.
func checkCases(t *testing.T, tk *Tokenizer, cases []tokCase, roundTrip bool) {
	t.Helper()
	bad, roundTrips := 0, 0
	for i, c := range cases {
		got := tk.Encode(c.Text)
		if !slices.Equal(got, c.IDs) {
			bad++
			if bad <= 10 {
				k := 0
				for k < len(got) && k < len(c.IDs) && got[k] == c.IDs[k] {
					k++
				}
				t.Errorf("case %d %q: ids differ from index %d:\n got  %v\n want %v", i, c.Text, k, got, c.IDs)
			}
			continue
		}
		dec, err := tk.Decode(got)
		if err != nil {
			t.Errorf("case %d %q: Decode: %v", i, c.Text, err)
			continue
		}
		if c.Decoded != nil && dec != *c.Decoded {
			t.Errorf("case %d %q: Decode = %q, HF decodes %q", i, c.Text, dec, *c.Decoded)
		}
		if roundTrip && norm.NFC.IsNormalString(c.Text) {
			roundTrips++
			if dec != c.Text {
				t.Errorf("case %d: decode(encode(%q)) = %q", i, c.Text, dec)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d cases have wrong ids", bad, len(cases))
	}
	t.Logf("%d cases, exact ids on %d, %d round trips checked", len(cases), len(cases)-bad, roundTrips)
}

func caseName(path string) string {
	return strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
}

func TestQwen3Cases(t *testing.T) {
	tk := loadQwen(t)
	for _, name := range []string{"cases.jsonl", "hf_edge_cases.jsonl"} {
		p := filepath.Join(qwenDir, name)
		t.Run(caseName(p), func(t *testing.T) { checkCases(t, tk, readCases(t, p), true) })
	}
}

// TestExtraFixtures runs every *tokenizer*.jsonl under $FASTVIDEO_EXTRA_FIXTURES
// with the tokenizer.json(.gz) of its own folder, or the Qwen3 fixture.
func TestExtraFixtures(t *testing.T) {
	root := os.Getenv(extraFixturesEnv)
	if root == "" {
		t.Skipf("%s is not set", extraFixturesEnv)
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ok, _ := filepath.Match("*tokenizer*.jsonl", d.Name()); ok && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s=%s: %v", extraFixturesEnv, root, err)
	}
	if len(files) == 0 {
		t.Skipf("no *tokenizer*.jsonl under %s=%s", extraFixturesEnv, root)
	}
	for _, p := range files {
		t.Run(caseName(p), func(t *testing.T) {
			tk := loadQwen(t)
			if file, err := resolvePath(filepath.Dir(p)); err == nil {
				// Other tokenizer packages (e.g. a Unigram one for UMT5) share
				// the naming convention; their cases are theirs to check.
				if typ := modelType(t, file); typ != "BPE" {
					t.Skipf("%s has a %q model, not a byte-level BPE", file, typ)
				}
				if tk, err = LoadWith(file, Options{CacheDir: testCacheDir}); err != nil {
					t.Fatal(err)
				}
			}
			checkCases(t, tk, readCases(t, p), true)
		})
	}
}

// modelType reads model.type of a tokenizer.json(.gz).
func modelType(t *testing.T, file string) string {
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if zr, err := gzip.NewReader(bytes.NewReader(raw)); err == nil {
		if raw, err = io.ReadAll(zr); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	var f struct {
		Model struct {
			Type string `json:"type"`
		} `json:"model"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return f.Model.Type
}

// TestAddedTokenFlags checks lstrip, rstrip, single_word, normalized, overlapping
// added tokens, a repeated declaration, an empty one, legacy "a b" merges and a
// repeated merge against ids from HF tokenizers on a small synthetic file.
func TestAddedTokenFlags(t *testing.T) {
	tk, err := LoadWith(flagsDir, Options{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	checkCases(t, tk, readCases(t, filepath.Join(flagsDir, "flags_cases.jsonl")), false)
}

// TestMergesAsPairs converts the synthetic file's legacy merges to [a, b] pairs:
// both spellings must tokenize alike.
func TestMergesAsPairs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(flagsDir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	model := f["model"].(map[string]any)
	var pairs [][]string
	for _, m := range model["merges"].([]any) {
		a, b, _ := strings.Cut(m.(string), " ")
		pairs = append(pairs, []string{a, b})
	}
	model["merges"] = pairs
	tk, err := LoadWith(writeJSON(t, f), Options{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	checkCases(t, tk, readCases(t, filepath.Join(flagsDir, "flags_cases.jsonl")), false)
}

func writeJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDecodeCases(t *testing.T) {
	tk := loadQwen(t)
	p := filepath.Join(qwenDir, "hf_decode_cases.jsonl")
	f, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range bytes.Split(bytes.TrimSpace(f), []byte("\n")) {
		var c struct {
			IDs  []int  `json:"ids"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		got, err := tk.Decode(c.IDs)
		if err != nil {
			t.Errorf("Decode(%v): %v", c.IDs, err)
		} else if got != c.Text {
			t.Errorf("Decode(%v) = %q, HF gives %q", c.IDs, got, c.Text)
		}
		n++
	}
	t.Logf("%d id sequences decoded like HF (incl. cut multi-byte characters -> U+FFFD)", n)
}

func TestDecodeRejectsUnknownIDs(t *testing.T) {
	tk := loadQwen(t)
	for _, id := range []int{-1, tk.VocabSize(), 1 << 40} {
		if _, err := tk.Decode([]int{9707, id}); err == nil || !strings.Contains(err.Error(), "ids[1]") {
			t.Errorf("Decode with id %d: err = %v, want an error naming ids[1]", id, err)
		}
	}
}

// TestSpeechMarkupIsPlainText: H3's `(S1) ... <d>[English] ...</d>` markup is
// not made of added tokens; it tokenizes like any text, with no special id.
func TestSpeechMarkupIsPlainText(t *testing.T) {
	tk := loadQwen(t)
	const prompt = "(S1) A presenter says <d>[English] Fast H3 is amazing.</d>"
	ids := tk.Encode(prompt)
	want := []int{3759, 16, 8, 362, 33656, 2727, 366, 67, 30768, 22574, 60, 17288, 472, 18, 374, 7897, 3918, 67, 29}
	if !slices.Equal(ids, want) {
		t.Fatalf("Encode(%q) = %v, HF gives %v", prompt, ids, want)
	}
	var pieces []string
	for _, id := range ids {
		if id >= 151643 {
			t.Errorf("id %d is an added/special token", id)
		}
		s, _ := tk.Decode([]int{id})
		pieces = append(pieces, s)
	}
	// "<d>" and "</d>" are ordinary punctuation + letter pieces.
	if got := strings.Join(pieces, "|"); got != "(S|1|)| A| presenter| says| <|d|>[|English|]| Fast| H|3| is| amazing|.</|d|>" {
		t.Errorf("pieces = %s", got)
	}
	if dec, _ := tk.Decode(ids); dec != prompt {
		t.Errorf("round trip = %q", dec)
	}
}

func TestVocabSizeAndFingerprint(t *testing.T) {
	tk := loadQwen(t)
	if tk.VocabSize() != 151669 {
		t.Errorf("VocabSize = %d, want 151669 (151643 BPE tokens + 26 added)", tk.VocabSize())
	}
	gz, err := os.ReadFile(qwenFile)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, zr); err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString(h.Sum(nil)); tk.Fingerprint() != want {
		t.Errorf("Fingerprint = %s, want sha256 of the JSON %s", tk.Fingerprint(), want)
	}
}

// writeGzipTokenizer writes what fill writes, gzip-compressed at level, to tokenizer.json.gz in a fresh
// folder, and returns its path and compressed size.
func writeGzipTokenizer(t *testing.T, level int, fill func(io.Writer) error) (path string, size int) {
	t.Helper()
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, level)
	if err != nil {
		t.Fatal(err)
	}
	if err := fill(zw); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "tokenizer.json.gz")
	if err := os.WriteFile(path, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, gz.Len()
}

// TestGzipAndPlainAgree: the .json and .json.gz of a tokenizer load alike and
// share a fingerprint; a folder resolves to its tokenizer file.
func TestGzipAndPlainAgree(t *testing.T) {
	plain := filepath.Join(flagsDir, "tokenizer.json")
	data, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	gzPath, _ := writeGzipTokenizer(t, gzip.DefaultCompression, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	a, err := LoadWith(plain, Options{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadWith(filepath.Dir(gzPath), Options{NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.Fingerprint() != b.Fingerprint() {
		t.Errorf("fingerprints differ: %s vs %s", a.Fingerprint(), b.Fingerprint())
	}
	if sum := sha256.Sum256(data); a.Fingerprint() != hex.EncodeToString(sum[:]) {
		t.Errorf("Fingerprint is not the sha256 of tokenizer.json")
	}
	if x, y := a.Encode("hello <ls> world"), b.Encode("hello <ls> world"); !slices.Equal(x, y) {
		t.Errorf("encodings differ: %v vs %v", x, y)
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "neither tokenizer.json") {
		t.Errorf("empty folder: err = %v", err)
	}
}

func TestQwenFolderLoad(t *testing.T) {
	dir := t.TempDir() // a snapshot's tokenizer/ folder: the gzipped tokenizer.json beside its config
	for src, name := range map[string]string{qwenFile: "tokenizer.json.gz", filepath.Join(qwenDir, "tokenizer_config.json"): "tokenizer_config.json"} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tk, err := LoadWith(dir, Options{CacheDir: testCacheDir})
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.Encode("Hello, my dog is cute"); !slices.Equal(got, []int{9707, 11, 847, 5562, 374, 18838}) {
		t.Errorf("Encode = %v", got)
	}
}

// TestConcurrentEncode: one Tokenizer serves many goroutines (run with -race).
func TestConcurrentEncode(t *testing.T) {
	tk := loadQwen(t)
	cases := readCases(t, filepath.Join(qwenDir, "cases.jsonl"))
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < 20; r++ {
				for _, c := range cases {
					if got := tk.Encode(c.Text); !slices.Equal(got, c.IDs) {
						t.Errorf("Encode(%q) = %v", c.Text, got)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
