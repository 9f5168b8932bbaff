"""The conversion fixes applied by default (safe, `rewrites/conversions.py: exact_problem`): `.item()`
and `float()` whose number only meets a tensor of the source's dtype in `+ - *`, as a divisor (kept on
the CPU, as the number was), comparisons, `torch.where` or `masked_fill` become detached 0-d tensors;
so do counts of masked selections (TP402). Proven here side by side, bit for bit:
values (NaN payloads and -0.0 included), dtypes, shapes, `requires_grad`, gradients and raised errors,
over every dtype family, special values, empty and 0-d inputs and broadcasting; and the forms left
unsafe are shown to differ. `check_on_cuda()` runs the same proof on a GPU
(`python -c "from tests.test_fix_safe_proof import check_on_cuda; check_on_cuda()"`)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch._dynamo  # noqa: E402, F811

from tests.test_fix_conversions import fix, lint, module  # noqa: E402

# Forward bodies whose conversion is fixed by default; each is run below against its original.
SAFE = {
    "centred": "s = x.mean().item()\nreturn x - s",
    "threshold": "s = x.mean().item()\nreturn torch.where(x > s, x, -x), s <= x, x != s",
    "scaled-by-peak": "y = x * 2\nreturn y * y.amax().item() + x, x.amin().item() * x",
    "peak-filled": "return torch.where(x > 0, x.amax().item(), x), x.masked_fill(x < 0, x.amin().item())",
    "in-place": "y = x.clone()\ny.mul_(x.max().item())\ny.sub_(x.min().item())\nreturn y",
    "methods": "lo = x.min().item()\nreturn x.add(lo), torch.sub(x, lo), x.ge(lo), torch.eq(x, lo)",
    "rebound-in-its-statement": "h = x.clone()\nh = h - h.amax().item()\nreturn h",
    "divided": "s = x.amax().item()\nreturn x / s, x // s, x % s, x.div(s), torch.div(x, s)",
    "normalised-by-magnitude": "return x / x.abs().amax().item(), x - x.abs().mean().item()",
    "normalised-by-norm": "return x / x.norm().item(), x * x.std().item(), x > x.var().item(), x - x.median().item()",
    "divided-in-place": "h = x.clone()\nh /= h.amin().item()\nreturn h",
    "count-divides": "h = x.double()\nn = h[h > 0].numel()\nreturn h / n, h // n, h % n, h * n, h > n",
    "augmented": "h = x.clone()\nh -= h.amax().item()\nh *= h.amin().item()\nreturn h",
    "float-of-floating": "y = x.double()\nreturn y - float(y.mean()), float(y.amax()) * y",
    # `max(count, 1.0)` of a boolean count: the integer clamp holds the number's value; as the float `1.0`
    # it met only floating tensors (a loss of the functional API raises on integers, so it is floating)
    "clamped-count": "h = x.double()\nn = max((h > 0).sum().item(), 1.0)\nreturn h / n, h * n, h > n, h.sum() / n",
    "clamped-count-int": "m = x > 0\nn = max(int(m.sum()), 1)\ny = x.float()\nreturn y / n, y - n, m * n",
    "count-normalises-loss": (
        "h = x.double()\nn = max((h > 1).sum().item(), 1.0)\n"
        "return torch.nn.functional.mse_loss(h, h * 2, reduction='sum') / n"
    ),
}
# Forward bodies whose conversion stays unsafe, and the words of the reason.
UNSAFE = {
    "divides-a-number": ("s = x.amax().item()\nreturn s / x", "in `s / x`"),
    "number-arithmetic": ("s = x.mean().item()\nreturn x - (s + 1e-3)", "in `s + 0.001`"),
    "power": ("s = x.mean().item()\nreturn x.abs() ** s", "in `x.abs() ** s`"),
    "clamped": ("s = x.mean().item()\nreturn x.clamp(min=s)", "not only beside a tensor of its dtype"),
    "sum-promotes": ("s = x.sum().item()\nreturn x * s", "in `x * s`"),
    "other-dtype": ("y = x.float()\ns = x.mean().item()\nreturn y * s", "in `y * s`"),
    "rebound-source": ("y = x * 2\ny = y + 1\ns = y.mean().item()\nreturn y - s", "`y` is bound more than once"),
    # A `:=` in the statement may rebind what the conversion reads: its names must have one value.
    "walrus-in-statement": ("x = x * 1\nreturn x - x.amax().item() + (h := x).sum()", "`x` is bound more than once"),
    "element": ("s = x[0].item()\nreturn x - s", "clamped or reshaped"),
    "max-eps": ("return x * max(x.amax().item(), 1.0)", "clamped or reshaped"),
    # the float `1.0` times an integer tensor is floating, the int64 clamp times it integral
    "clamped-count-beside-any-dtype": ("n = max((x > 0).sum().item(), 1.0)\nreturn x * n", "meets exactly"),
    "clamped-count-fractional-bound": ("y = x.double()\nreturn y / max((y > 0).sum().item(), 0.5)", "integer"),
    "int": ("n = int(x.amax())\nreturn x - n", "`int()` truncates"),
    "count-beside-any-dtype": ("n = x[x > 0].numel()\nreturn x * n", ""),
    "augmented-power": ("h = x.clone()\nh **= h.amax().item()\nreturn h", "in `h **= h.amax().item()`"),
    "float-of-unknown": ("return x - float(x.mean())", "not proven floating"),
    "negated": ("s = x.amax().item()\nreturn x * -s", "in `-s`"),
}

DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.bool,
]
SPECIAL = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 65504.0, 1e-40, -3.5]


def _model(source: str):
    namespace: dict = {}
    exec(compile(source, "<model>", "exec"), namespace)
    model = namespace["Model"]()
    return model


def _inputs(dtype, device: str) -> list:
    """Values of every sign and size, the special floats, an empty and a 0-d tensor, broadcasting rows."""
    generator = torch.Generator().manual_seed(hash(str(dtype)) % 1000)
    base = torch.randn(3, 1, 4, generator=generator, dtype=torch.float64) * 7
    special = torch.tensor(SPECIAL, dtype=torch.float64)
    samples = [base, base.flatten()[:5], special, special.flip(0), torch.empty(0, 4), torch.tensor(-2.25)]
    if dtype.is_complex:
        samples.append(torch.complex(base, base.flip(-1)))
    out = []
    for sample in samples:
        if not (dtype.is_floating_point or dtype.is_complex):
            sample = sample.nan_to_num(0.0, 100.0, -100.0).clamp(-100, 100)
            sample = sample.abs() if dtype is torch.uint8 else sample
        out.append(sample.to(dtype).to(device))
    return out


def _outcome(model, x: torch.Tensor, grad: bool):
    """What running `model` on `x` gives: its outputs (and the input's gradient), or its error."""
    if grad:
        x = x.detach().requires_grad_()
    try:
        outputs = model(x)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        if grad:
            floating = [o for o in outputs if o.requires_grad]
            torch.autograd.backward(floating, [torch.ones_like(o) for o in floating])
            return outputs, x.grad
        return outputs, None
    except Exception as error:  # the same error must be raised at the same point
        return type(error), str(error).split("\n")[0]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of `t`, so that the sign of zero counts; every NaN made one NaN first: its sign
    and payload are the hardware's choice, which one kernel makes differently in its vector and
    scalar loops (on x86, `torch.full((40,), nan) * -torch.tensor(nan)` holds NaNs of both signs)."""
    t = t.detach()
    if t.is_floating_point() or t.is_complex():
        t = torch.where(t.isnan(), torch.full_like(t, float("nan")), t)
    return t.contiguous().reshape(-1).view(torch.uint8) if t.numel() and t.dtype != torch.bool else t


def _assert_identical(expected, actual, where: str) -> None:
    if isinstance(expected[0], type):
        assert expected == actual, where
        return
    (outs_e, grad_e), (outs_a, grad_a) = expected, actual
    assert len(outs_e) == len(outs_a), where
    for e, a in zip(outs_e, outs_a):
        assert (e.dtype, e.shape, e.requires_grad) == (a.dtype, a.shape, a.requires_grad), where
        assert torch.equal(_bits(e), _bits(a)), where
    assert (grad_e is None) == (grad_a is None), where
    if grad_e is not None:
        assert torch.equal(_bits(grad_e), _bits(grad_a)), where


def _prove(name: str, device: str = "cpu") -> None:
    original = module(SAFE[name])
    fixed, _ = fix(original, unsafe=False)
    assert fixed != original, "the safe fix was not applied with the default flags"
    prove_identical(name, original, fixed, device)


def prove_identical(name: str, original: str, fixed: str, device: str) -> None:
    """`fixed` computes what `original` computes, bit for bit, on every input of `_inputs`."""
    before, after = _model(original).to(device), _model(fixed).to(device)
    for dtype in DTYPES:
        for index, x in enumerate(_inputs(dtype, device)):
            for grad in (False, True) if dtype.is_floating_point else (False,):
                where = f"{name} {dtype} input {index} grad={grad}"
                _assert_identical(_outcome(before, x, grad), _outcome(after, x, grad), where)


@pytest.mark.parametrize("name", sorted(SAFE))
def test_safe_fix_is_identical_bit_for_bit(name):
    _prove(name)


@pytest.mark.parametrize("name", sorted(SAFE))
def test_safe_fix_removes_the_break(name):
    fixed, _ = fix(module(SAFE[name]), unsafe=False)
    assert not [d for d in lint(fixed) if d.code.startswith("TP30")]
    torch._dynamo.reset()
    model = _model(fixed)
    explained = torch._dynamo.explain(model.forward)(torch.randn(3, 4))
    torch._dynamo.reset()
    assert explained.graph_break_count == 0 and explained.graph_count == 1


@pytest.mark.parametrize("name", sorted(UNSAFE))
def test_unproven_uses_stay_unsafe(name):
    body, reason = UNSAFE[name]
    found = [d for d in lint(module(body)) if d.code in ("TP301", "TP303", "TP402")]
    assert found and all(d.fix is not None and d.fix.safety == "unsafe" for d in found)
    assert reason in found[0].fix.title, found[0].fix.title
    assert fix(module(body), unsafe=False)[0] == module(body)


def test_power_by_a_number_takes_other_kernels():
    """Why `**` is not an exact use: `x ** 0.5` of a number is `sqrt` (on CUDA `/` differs too, see
    `check_on_cuda`: a number divides by multiplying with its reciprocal there)."""
    x = torch.tensor([-0.0, 4.0, float("-inf")])
    assert not torch.equal(_bits(x**0.5), _bits(x ** torch.tensor(0.5)))


# Operators a number may meet as the 0-d CPU tensor the fix makes of a divisor (`s / x` is not one).
CPU_SCALAR_USES = {
    "/": lambda x, s: x / s,
    "//": lambda x, s: x // s,
    "%": lambda x, s: x % s,
    "div_": lambda x, s: x.clone().div_(s),
    "/=": lambda x, s: x.clone().__itruediv__(s),
    "+": lambda x, s: x + s,
    "-": lambda x, s: s - x,
    "*": lambda x, s: x * s,
    ">": lambda x, s: x > s,
    "where": lambda x, s: torch.where(x > 0, s, x),
    "masked_fill": lambda x, s: x.masked_fill(x > 0, s),
}


def _number_and_cpu_tensor_agree(device: str) -> None:
    """`x op s.item()` and `x op s.detach().cpu()` give the same bits (or the same error): a Python
    number reaches the kernel as a 0-d CPU tensor too, which a CUDA kernel reads as a CPU scalar."""
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8):
        for trial in range(12):
            x = _inputs(dtype, "cpu")[trial % 4].reshape(-1).repeat(700).to(device)  # vector and scalar loops
            s = x.reshape(-1)[trial % x.numel()] if x.numel() else torch.tensor(0, dtype=dtype, device=device)
            for name, use in CPU_SCALAR_USES.items():
                expected, actual = (_outcome(lambda x: use(x, number), x, False) for number in (s.item(), s.cpu()))
                _assert_identical(expected, actual, f"{name} {dtype} trial {trial}")
            if dtype.is_floating_point:  # the gradient of a division goes through the same kernel
                expected, actual = (_outcome(lambda x: x / number, x, True) for number in (s.item(), s.cpu()))
                _assert_identical(expected, actual, f"/ gradient {dtype} trial {trial}")


def test_a_number_and_a_cpu_tensor_agree():
    _number_and_cpu_tensor_agree("cpu")


def check_on_cuda() -> None:
    """The proof on a GPU; a number and a 0-d CPU tensor agree there, and a 0-d CUDA tensor does not:
    CUDA divides by a CPU scalar by multiplying with its reciprocal."""
    assert torch.cuda.is_available(), "needs a CUDA device"
    for name in sorted(SAFE):
        _prove(name, "cuda")
    _number_and_cpu_tensor_agree("cuda")
    x = torch.randn(1 << 16, device="cuda")
    assert not torch.equal(x / 3.0, x / torch.tensor(3.0, device="cuda"))
    print(f"CUDA: {len(SAFE)} safe conversion fixes identical bit for bit; a divisor must stay on the CPU")


@pytest.mark.gpu
def test_safe_fixes_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    check_on_cuda()
