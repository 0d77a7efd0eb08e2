"""MoE expert placement (pure): DeepSeek EPLB as the baseline, an improved anti-affine placement,
balancedness metrics, engine map formats (SGLang, vllm-ascend), and the rebalance trigger.

Inputs are per-layer, per-expert token counts; outputs are physical-slot maps per EP group.
"""
