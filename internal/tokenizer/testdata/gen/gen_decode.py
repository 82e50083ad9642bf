# Writes dec_seqs.json: id sequences for decode.js (cut UTF-8 sequences, added tokens, random ids).
import json, random, gzip, os
random.seed(3)
q = json.load(gzip.open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'qwen3data', 'tokenizer.json.gz')))
v = q['model']['vocab']
bs = list(range(ord('!'), ord('~')+1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs = bs[:]; n = 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256+n); n += 1
b2c = {b: chr(c) for b, c in zip(bs, cs)}
byte_id = [v[b2c[b]] for b in range(256)]
seqs = [[], [byte_id[0xE4], byte_id[0xB8]], [byte_id[0xE4], byte_id[0xB8], byte_id[0xAD]], [byte_id[0xFF], byte_id[0xFE]], [byte_id[0xF0], byte_id[0x9F], byte_id[0x98]],
        [byte_id[0xED], byte_id[0xA0], byte_id[0x80]], [byte_id[0xC0], byte_id[0xAF]], [byte_id[0xE0], byte_id[0x80]], [byte_id[0xF4], byte_id[0x90]], [byte_id[0x80]]*3,
        [151643, 151644, 151645], [151667, 9707, 151668], list(range(151640, 151669))]
for _ in range(150):
    L = random.randint(1, 12)
    s = []
    for _ in range(L):
        r = random.random()
        if r < 0.4: s.append(byte_id[random.randrange(128, 256)])
        elif r < 0.5: s.append(random.randrange(151643, 151669))
        else: s.append(random.randrange(0, 151643))
    seqs.append(s)
json.dump(seqs, open('dec_seqs.json', 'w'))
