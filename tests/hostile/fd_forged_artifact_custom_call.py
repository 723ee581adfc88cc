# task: drift
# attack: inherited fds: exports (with jax.export reached through the real getattr, its custom-call safety check disabled) a drift containing a foreign custom call (jax.ffi.ffi_call to a kernel target; jax.export refuses to serialise Python host callbacks, so a forged artifact can only carry a custom call), forges a successful "trace" result with that artifact, and kills itself
# contained: the trainer refuses the artifact (no custom calls but shape_assertion) before compiling it; the candidate fails
# expect: fail
J = jax
OS = J.version.os
B = J.version.subprocess.builtins
TARGET = "metarl_hostile_kernel"


def imp(name):
    return B.getattr(B, "_" + "_import_" + "_")(name, None, None, ["x"])


def kernel(x):
    call = B.getattr(jax, "ffi").ffi_call(TARGET, jax.ShapeDtypeStruct(x.shape, x.dtype), vmap_method="sequential")
    return call(x)


def kernel_jvp(primals, tangents):
    return kernel(primals[0]), 0.0 * tangents[0]


def per_element(ratio, advantage):
    spy = jax.custom_jvp(kernel)
    spy.defjvp(kernel_jvp)
    clipped = jnp.clip(ratio, 0.8, 1.2)
    return (jax.nn.relu((ratio - clipped) * advantage) + 0.0 * spy(ratio),)


def forge():
    module = B.getattr(jax, "export")
    (n,) = module.symbolic_shape("n")
    spec = jax.ShapeDtypeStruct((n,), jnp.float32)
    checks = [module.DisabledSafetyCheck.custom_call(TARGET)]
    exported = B.getattr(module, "export")(jax.jit(jax.vmap(per_element)), platforms=["cpu"], disabled_checks=checks)(spec, spec)
    blobs = {"epsilon=0.2": B.bytes(exported.serialize(vjp_order=1))}
    artifact = imp("metarl.rl.verifier.artifact").encode(blobs)
    message = {"event": "result", "kind": "trace", "payload": {"ok": True, "artifact": artifact, "warnings": []}}
    line = (B.getattr(imp("json"), "dumps")(message) + "\n").encode()
    for name in OS.listdir("/proc/self/fd"):
        try:
            if OS.readlink(f"/proc/self/fd/{name}").startswith("pipe:") and int(name) > 2:
                OS.write(int(name), line)
        except OS.error:
            pass


def drift(ratio, advantage, epsilon):
    forge()
    OS.kill(OS.getpid(), 9)
    return ratio
