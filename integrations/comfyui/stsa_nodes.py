"""ComfyUI nodes: "stsa settings" (method, density, error budget, dense steps
and layers) and "stsa sparse attention" (patches a MODEL so its video
self-attention runs through stsa on the CPU)."""

try:  # inside ComfyUI this file is part of a package
    from .stsa_override import METHODS, StsaAttention
except ImportError:  # the tests import it from this folder
    from stsa_override import METHODS, StsaAttention


class StsaSettings:
    """What the attention override does; an STSA_SETTINGS for the patch node."""

    CATEGORY = "stsa"
    RETURN_TYPES = ("STSA_SETTINGS",)
    FUNCTION = "settings"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "method": (list(METHODS), {"default": "svg"}),
            # 0 keeps the method's default (SVG: 0.3; SVG2: its top-p)
            "density": ("FLOAT", {"default": 0.0, "min": 0.0, "max": 1.0, "step": 0.01}),
            # 0: no error budget
            "max_error": ("FLOAT", {"default": 0.0, "min": 0.0, "max": 10.0, "step": 0.01}),
            "dense_steps": ("INT", {"default": 10, "min": 0, "max": 10000}),
            "dense_layers": ("INT", {"default": 1, "min": 0, "max": 10000}),
        }}

    def settings(self, method, density, max_error, dense_steps, dense_layers):
        return (dict(method=method, density=density or None, max_error=max_error or None,
                     dense_steps=dense_steps, dense_layers=dense_layers),)


class StsaPatchModel:
    """A copy of the MODEL whose attention calls go through stsa (video
    self-attention) or ComfyUI's own attention (everything else)."""

    CATEGORY = "stsa"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "settings": ("STSA_SETTINGS",)}}

    def patch(self, model, settings):
        patched = model.clone()
        options = patched.model_options.setdefault("transformer_options", {})
        options["optimized_attention_override"] = StsaAttention(**settings)
        return (patched,)


NODE_CLASS_MAPPINGS = {"StsaSettings": StsaSettings, "StsaPatchModel": StsaPatchModel}
NODE_DISPLAY_NAME_MAPPINGS = {"StsaSettings": "stsa settings",
                              "StsaPatchModel": "stsa sparse attention"}
