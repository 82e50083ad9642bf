# Compares the operations two versions of a Pallas kernel body perform, on a machine without JAX: jax,
# jax.numpy, lax, pallas and its triton module are replaced by stand-ins that record every call, load,
# store and arithmetic operation as text, each loop body is traced once with a symbolic index, and the two
# records must be equal, in order. A refactor of a kernel generator (attention/testdata/gen_*_triton.py)
# that leaves the record unchanged lowers to the same Triton IR; one that moves a load or reorders a
# product shows where. It checks structure, not what JAX would accept: the GPU run still regenerates and
# tests the IR.
#
#   python3 bench/pallas_trace.py OLD.py EXPR NEW.py EXPR
#   e.g. git show HEAD~1:attention/testdata/gen_vsa_triton.py > /tmp/old.py
#        python3 bench/pallas_trace.py /tmp/old.py vsa_kernel attention/testdata/gen_vsa_triton.py 'fine_kernel(walk_class)'
# EXPR is evaluated in the module's namespace and names the kernel body; its refs are named after its
# parameters. Exits 1 when the records differ, printing the first difference. Needs numpy (the generators
# import it at load).
import importlib.util, inspect, os, sys, types

HERE = os.path.dirname(os.path.abspath(__file__))
record = []


class Sym:
    # A traced value: its expression as text. Every operation on one is recorded.
    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text

    def _op(self, op, other, reverse=False):
        out = Sym(f"({other!r} {op} {self!r})" if reverse else f"({self!r} {op} {other!r})")
        record.append(out.text)
        return out

    def __add__(self, o): return self._op("+", o)
    def __radd__(self, o): return self._op("+", o, True)
    def __sub__(self, o): return self._op("-", o)
    def __rsub__(self, o): return self._op("-", o, True)
    def __mul__(self, o): return self._op("*", o)
    def __rmul__(self, o): return self._op("*", o, True)
    def __truediv__(self, o): return self._op("/", o)
    def __floordiv__(self, o): return self._op("//", o)
    def __neg__(self): return self._op("neg", 0)
    def __lt__(self, o): return self._op("<", o)
    def __gt__(self, o): return self._op(">", o)
    def __ge__(self, o): return self._op(">=", o)
    def __le__(self, o): return self._op("<=", o)

    def __getitem__(self, key):
        out = Sym(f"{self!r}[{key!r}]")
        record.append("load " + out.text)
        return out

    def __setitem__(self, key, value):
        record.append(f"store {self!r}[{key!r}] = {value!r}")

    @property
    def T(self):
        out = Sym(f"{self!r}.T")
        record.append(out.text)
        return out

    @property
    def dtype(self):
        return Sym(f"dtype({self!r})")

    @property
    def at(self):
        ref = self

        class At:
            def __getitem__(self, key):
                return Sym(f"{ref!r}.at[{key!r}]")
        return At()

    def astype(self, dtype):
        out = Sym(f"astype({self!r}, {dtype!r})")
        record.append(out.text)
        return out


def call(name):
    def f(*args, **kw):
        kws = "".join(f", {k}={v!r}" for k, v in sorted(kw.items()))
        out = Sym(f"{name}({', '.join(map(repr, args))}{kws})")
        record.append(out.text)
        return out
    return f


class Recorder(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return call(f"{self.__name__}.{name}")


def fori_loop(lo, hi, body, carry):
    record.append(f"fori_loop({lo!r}, {hi!r})")
    out = body(Sym("i"), carry)
    record.append(f"end fori_loop -> {out!r}")
    return out


def install():
    jax, jnp, lax = Recorder("jax"), Recorder("jnp"), Recorder("lax")
    experimental, pl, triton = Recorder("jax.experimental"), Recorder("pl"), Recorder("plgpu")
    jnp.float32, jnp.int32, jnp.bfloat16, jnp.float16, jnp.inf = "f32", "i32", "bf16", "f16", float("inf")
    lax.fori_loop = fori_loop
    pl.program_id = lambda axis: Sym(f"program_id{axis}")
    jax.numpy, jax.lax, jax.experimental, experimental.pallas, pl.triton = jnp, lax, experimental, pl, triton
    # The generators' own helpers beside them that import JAX at load (gen_triton) are not traced.
    gen_triton = Recorder("gen_triton")
    sys.modules.update({"jax": jax, "jax.numpy": jnp, "jax.lax": lax, "jax.experimental": experimental,
                        "jax.experimental.pallas": pl, "jax.experimental.pallas.triton": triton,
                        "gen_triton": gen_triton})


def trace(path, expr, tag):
    spec = importlib.util.spec_from_file_location(f"traced_{tag}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = eval(expr, vars(module))
    record.clear()
    kernel(*(Sym(p) for p in inspect.signature(kernel).parameters))
    return list(record)


def main():
    if len(sys.argv) != 5:
        print("usage: pallas_trace.py OLD.py EXPR NEW.py EXPR (see the comment at its top)", file=sys.stderr)
        sys.exit(2)
    install()
    old = trace(sys.argv[1], sys.argv[2], "old")
    new = trace(sys.argv[3], sys.argv[4], "new")
    if old == new:
        print(f"the same {len(new)} operations in the same order")
        return
    at = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    print(f"{len(old)} against {len(new)} operations; the first difference, operation {at}:")
    print("  old:", old[at] if at < len(old) else "(none)")
    print("  new:", new[at] if at < len(new) else "(none)")
    sys.exit(1)


if __name__ == "__main__":
    main()
