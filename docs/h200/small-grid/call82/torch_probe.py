import sys, torch, torch.nn.functional as F
S = int(sys.argv[1])
q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
k = torch.randn(1, 8, S, 128, device="cuda", dtype=torch.bfloat16)
v = torch.randn(1, 8, S, 128, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.cuda.synchronize()
