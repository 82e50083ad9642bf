# Golden fixture for JPEG decoding (kind "jpeg_pil"): small JPEG files of every chroma subsampling
# the Go decoder accepts, and what FastVideo's loader makes of them
# (fastvideo/models/vision_utils.py load_image: PIL.Image.open, exif_transpose, convert("RGB"),
# i.e. the libjpeg-turbo inside Pillow with its default fancy upsampling and JDCT_ISLOW).
#
#   FASTVIDEO_SRC=/path/to/FastVideo python3 gen_jpeg.py OUTDIR
#
# Needs python3 with numpy, PIL, safetensors and cv2 (OpenCV writes the 4:4:0 and 4:1:1 files that
# Pillow's encoder cannot; without its IMWRITE_JPEG_SAMPLING_FACTOR those cases are left out and
# listed under "skipped"), and a FastVideo checkout (only fastvideo/models/vision_utils.py is read:
# load_image is executed verbatim from it, as gen_i2v.py in fastvideo/wan/testdata does).
#
# Two kinds of picture: "flat" is made of 32x16 one-color blocks, so every 8x8 block of every
# component is constant and both inverse DCTs (image/jpeg's and libjpeg's jidctint.c) reconstruct
# it exactly: the Go decode must equal PIL's bit for bit, which pins the chroma upsampling and the
# color conversion alone. "picture" has noise and hard edges: there the two inverse DCTs round a
# sample one level apart now and then, and the Go test bounds the difference.
#
# Writes OUTDIR/jpeg_pil.safetensors and OUTDIR/jpeg_pil.json (about 200 KB).
import ast, io, json, os, sys, tempfile

import numpy as np
import PIL.Image
import PIL.ImageOps
import PIL.features
from safetensors.numpy import save_file

SRC = os.environ.get("FASTVIDEO_SRC") or sys.exit("set FASTVIDEO_SRC to a FastVideo checkout")
OUT = sys.argv[1] if len(sys.argv) > 1 else sys.exit("usage: gen_jpeg.py OUTDIR")

try:
    import cv2
except ImportError:
    cv2 = None


def upstream_load_image():
    path = os.path.join(SRC, "fastvideo/models/vision_utils.py")
    tree = ast.parse(open(path).read())
    ns = {"PIL": PIL, "io": io, "os": os, "Callable": __import__("collections.abc").abc.Callable}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "load_image":
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), ns)
            return ns["load_image"]
    sys.exit(f"{path}: no top-level load_image")


load_image = upstream_load_image()
rng = np.random.default_rng(1616)


def flat(h, w):
    colors = rng.integers(0, 256, ((h + 15) // 16, (w + 31) // 32, 3), dtype=np.uint8)
    return np.ascontiguousarray(colors.repeat(16, axis=0).repeat(32, axis=1)[:h, :w])


def picture(h, w):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = 128 + 100 * np.sin(x / 3.0)[..., None] * np.cos(y / 2.0)[..., None] * rng.random(3)
    img = base + rng.normal(0, 30, (h, w, 3))
    img[: (h + 1) // 2, : (w + 2) // 3] = rng.integers(0, 256, 3)  # a hard color edge
    return np.clip(img, 0, 255).astype(np.uint8)


def pil_jpeg(img, **kw):
    b = io.BytesIO()
    PIL.Image.fromarray(img).save(b, format="JPEG", **kw)
    return b.getvalue()


def cv2_jpeg(factor):
    def enc(img, quality):
        ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(img[..., ::-1]),
                               [cv2.IMWRITE_JPEG_QUALITY, quality, cv2.IMWRITE_JPEG_SAMPLING_FACTOR, factor])
        assert ok
        return buf.tobytes()
    return enc


def sof_sampling(data):
    """The components' HxV sampling factors from the frame header, e.g. "2x2 1x1 1x1"."""
    i = 2
    while i + 4 <= len(data):
        marker, n = data[i + 1], int.from_bytes(data[i + 2:i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            comps = data[i + 9]
            return " ".join(f"{data[i + 11 + 3 * c] >> 4}x{data[i + 11 + 3 * c] & 15}" for c in range(comps))
        i += 2 + n
    raise ValueError("no SOF marker")


encoders = {
    "444": lambda img, q: pil_jpeg(img, quality=q, subsampling=0),
    "422": lambda img, q: pil_jpeg(img, quality=q, subsampling=1),
    "420": lambda img, q: pil_jpeg(img, quality=q, subsampling=2),
    "420_progressive": lambda img, q: pil_jpeg(img, quality=q, subsampling=2, progressive=True),
    "444_progressive": lambda img, q: pil_jpeg(img, quality=q, subsampling=0, progressive=True),
    "gray": lambda img, q: pil_jpeg(np.ascontiguousarray(img[..., 1]), quality=q),
    "rgb444": lambda img, q: pil_jpeg(img, quality=q, subsampling=0, keep_rgb=True),  # Adobe transform 0
}
skipped = []
if cv2 is not None and hasattr(cv2, "IMWRITE_JPEG_SAMPLING_FACTOR"):
    encoders["440"] = cv2_jpeg(0x121111)
    encoders["411"] = cv2_jpeg(0x411111)
else:
    skipped += ["440", "411"]

tensors, cases = {}, {}
tmp = tempfile.mkdtemp()
sizes = [(1, 1), (2, 3), (3, 2), (5, 7), (16, 24), (17, 33), (34, 17)]  # (h, w)
for kind, make, quality in [("flat", flat, 90), ("picture", picture, 85)]:
    for h, w in sizes:
        img = make(h, w)
        for enc_name, enc in encoders.items():
            data = enc(img, quality)
            name = f"{kind}_{enc_name}_{w}x{h}"
            path = os.path.join(tmp, name + ".jpg")
            open(path, "wb").write(data)
            out = np.ascontiguousarray(np.array(load_image(path), dtype=np.uint8))
            assert out.shape == (h, w, 3), (name, out.shape)
            tensors[f"in.{name}"] = np.frombuffer(data, dtype=np.uint8).copy()
            tensors[f"out.{name}"] = out
            cases[name] = {"file": f"in.{name}", "output": f"out.{name}", "exact": kind == "flat",
                           "encoding": enc_name, "sampling": sof_sampling(data), "quality": quality,
                           "mode": PIL.Image.open(path).mode}

meta = {"kind": "jpeg_pil", "module": "FastVideo fastvideo/models/vision_utils.py load_image (PIL decode)",
        "pillow": PIL.__version__, "libjpeg_turbo": PIL.features.version("libjpeg_turbo"),
        "opencv": cv2.__version__ if cv2 is not None else None, "skipped": skipped, "cases": cases}
meta["tensors"] = {k: [list(v.shape), str(v.dtype)] for k, v in tensors.items()}
js = json.dumps(meta, indent=1)
save_file(tensors, os.path.join(OUT, "jpeg_pil.safetensors"), metadata={"refgen": js})
open(os.path.join(OUT, "jpeg_pil.json"), "w").write(js + "\n")
print("wrote", os.path.join(OUT, "jpeg_pil.safetensors"), len(cases), "cases, skipped", skipped)
