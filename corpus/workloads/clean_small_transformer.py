# expect: clean
# A two-layer Transformer encoder over token sequences (a language-model
# shape), trained by AdamW as torch makes it on the CPU.
import torch

from _corpus import profiled

VOCAB, WIDTH, LENGTH = 2000, 128, 64


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        layer = torch.nn.TransformerEncoderLayer(WIDTH, nhead=4, dim_feedforward=4 * WIDTH, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, num_layers=2)
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, ids):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        return self.head(self.encoder(self.embed(ids), mask=mask, is_causal=True))


torch.manual_seed(0)
model = TinyLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
with profiled() as prof:
    for step in range(25):
        ids = torch.randint(0, VOCAB, (16, LENGTH + 1))
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        prof.step()
print(f"loss {loss.item():.3f}")
