import json, random, copy, gzip, os
random.seed(7)
q = json.load(gzip.open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'qwen3data', 'tokenizer.json.gz')))
# byte-level alphabet in GPT-2 order
bs = list(range(ord('!'), ord('~')+1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256+n); n += 1
b2c = {b: chr(c) for b, c in zip(bs, cs)}
vocab = {}
for b in range(256):
    vocab[b2c[b]] = len(vocab)
merges = [("h","e"),("l","l"),("he","ll"),("hell","o"),("Ġ","w"),("o","r"),("Ġw","or"),("l","d"),("Ġwor","ld"),
          ("a","a"),("aa","a"),("b","1"),("a","b"),("Ġ","Ġ"),("ĠĠ","ĠĠ"),("Ġ","t"),("Ġt","he"),("Ċ","Ċ"),("w","o"),("wo","r"),("wor","d"),
          ("a","a")]  # duplicate pair: HF keeps the last rank
for a, b in merges:
    for t in (a, b, a+b):
        if t not in vocab: vocab[t] = len(vocab)
nv = len(vocab)
def tok(content, **kw):
    d = {"id": None, "content": content, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": False}
    d.update(kw); return d
added = [tok("<ls>", lstrip=True, special=True), tok("<rs>", rstrip=True, special=True), tok("<both>", lstrip=True, rstrip=True, special=True),
         tok("word", single_word=True), tok("e\u0301x", normalized=True), tok("<sp>", special=True), tok("<sp"), tok("he"),
         tok("\u0120x"), tok(" sp "), tok("<sw>", single_word=True, lstrip=True), tok("ab", normalized=True, single_word=True),
         tok("", special=True), tok("<rs>", rstrip=True, special=True)]
nid = nv
out = []
seen = {}
for t in added:
    if t["content"] == "":
        t["id"] = 999; out.append(t); continue
    if t["content"] in seen: t["id"] = seen[t["content"]]
    elif t["content"] in vocab: t["id"] = vocab[t["content"]]
    else: t["id"] = nid; nid += 1
    seen[t["content"]] = t["id"]
    out.append(t)
f = copy.deepcopy(q)
f["added_tokens"] = out
f["model"]["vocab"] = vocab
f["model"]["merges"] = [a + " " + b for a, b in merges]
json.dump(f, open("flags_tokenizer.json", "w"), ensure_ascii=False, indent=1)
texts = ["", "hello world", "  <ls>x", "a <ls> b", "a\t\n <ls>", "<ls><ls>", "x<rs>  \n y", "<rs>", "a  <both>  b", " <both> <both> ",
 "word", "a word b", "awordb", "word_x", "xword", "word.", ".word", "wordword", "words", "sword", "é word", "\u0301word",
 "e\u0301x", "\u00e9x", "ae\u0301xb", "<sp>", "<sp", "<spx", "<sp><sp>", "a<sp>b", "hello", "he he", "the", "\u0120x", "a\u0120xb",
 " sp ", "a sp b", "<sw>", "a <sw>", "a<sw>", "  <sw>  ", "ab", "xab", "ab ab", "a b", "aaa", "aaaa", "aaaaaaa", "ab12", "b1",
 "the world", "word\nword", "hello <rs>   world", "<rs>\u00a0\u00a0x", "<ls>\u3000", "\u3000<ls>", "wordé", "éword", "word\u0301",
 "<both><rs><ls>", "<ls>   <rs>", "   ", "he<sp>he", "Ġ", "ĠĠĠĠ", "    ", "\n\n\n"]
al = ["<ls>","<rs>","<both>","word","e\u0301x","\u00e9x","<sp>","<sp","he","\u0120x"," sp ","<sw>","ab","a","b","1"," ","  ","\t","\n","w","o","r","d","l","é","\u0301","x","_","."]
for _ in range(250):
    texts.append("".join(random.choice(al) for _ in range(random.randint(1, 12))))
json.dump(texts, open("flags_texts.json", "w"))
