# expect: tiny_operators
# A classifier whose loop scores the batch sample by sample with tensor
# operations (argmax, compare, a confusion matrix updated per sample): the
# metrics, not the model, are thousands of small operators a step.
import torch

from _corpus import fashion_mnist, profiled

torch.manual_seed(0)
images, labels = fashion_mnist(128 * 30)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
confusion = torch.zeros(10, 10)
with profiled() as prof:
    for x, y in zip(images.split(128), labels.split(128)):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for i in range(len(y)):
                predicted = logits[i].argmax()
                confusion[y[i], predicted] += 1
        prof.step()
print(f"accuracy {confusion.diag().sum().item() / confusion.sum().item():.3f}")
