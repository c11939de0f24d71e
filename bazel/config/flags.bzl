"""Minimal build-setting rules (bazel_skylib is not available offline)."""

FlagInfo = provider(doc = "Value of a ddstore build flag.", fields = ["value"])

def _bool_flag_impl(ctx):
    return [FlagInfo(value = ctx.build_setting_value)]

bool_flag = rule(
    implementation = _bool_flag_impl,
    build_setting = config.bool(flag = True),
    doc = "A boolean command-line flag: --//bazel/config:<name>=true|false.",
)

def _string_flag_impl(ctx):
    v = ctx.build_setting_value
    if ctx.attr.values and v not in ctx.attr.values:
        fail("--%s=%s: expected one of %s" % (ctx.label, v, ", ".join(ctx.attr.values)))
    return [FlagInfo(value = v)]

string_flag = rule(
    implementation = _string_flag_impl,
    build_setting = config.string(flag = True),
    attrs = {"values": attr.string_list(doc = "Allowed values.")},
    doc = "A string command-line flag restricted to `values`.",
)
