"""A graph convolutional network (Kipf & Welling) on a Cora-format citation graph, written after pytorch/examples
gcn/main.py: the features and the renormalised adjacency D^-1/2 (A + I) D^-1/2 kept as sparse COO tensors,
`torch.mm(sparse, dense)` and `torch.spmm` in the layer, Adam with weight decay, NLLLoss on a random split.

    python gcn.py --data ./cora [--epochs 200] [--val-every 20]

--data holds cora.content (one node a line: id, binary features, class) and cora.cites (citing id, cited id).
"""
import argparse
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Adam


class GraphConv(nn.Module):
    """H' = A_hat (H W) (+ b): the features mixed over each node's neighbourhood."""

    def __init__(self, input_dim, output_dim, use_bias=False):
        super(GraphConv, self).__init__()
        self.kernel = nn.Parameter(torch.Tensor(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(torch.Tensor(output_dim))
            nn.init.zeros_(self.bias)

    def forward(self, input_tensor, adj_mat):
        support = torch.mm(input_tensor, self.kernel)
        output = torch.spmm(adj_mat, support)
        if self.bias is not None:
            output = output + self.bias
        return output


class GCN(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, use_bias=True, dropout_p=0.1):
        super(GCN, self).__init__()
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input_tensor, adj_mat):
        x = self.gc1(input_tensor, adj_mat)
        x = F.relu(x)
        x = self.dropout(x)
        x = self.gc2(x, adj_mat)
        return F.log_softmax(x, dim=1)


def load_cora(path, device):
    content = np.genfromtxt(os.path.join(path, 'cora.content'), dtype=np.dtype(str))
    cites = np.genfromtxt(os.path.join(path, 'cora.cites'), dtype=np.int32)

    features = torch.FloatTensor(content[:, 1:-1].astype(np.int32))
    scale_vector = torch.sum(features, dim=1)
    scale_vector = 1 / scale_vector
    scale_vector[scale_vector == float('inf')] = 0
    scale_vector = torch.diag(scale_vector).to_sparse()
    features = scale_vector @ features                      # each row normalised to sum 1

    classes, labels = np.unique(content[:, -1], return_inverse=True)
    labels = torch.LongTensor(labels)

    idx = content[:, 0].astype(np.int32)
    idx_map = {node: pos for pos, node in enumerate(idx)}
    edges = np.array([[idx_map[a], idx_map[b]] for a, b in cites], dtype=np.int32)
    V, E = len(idx), edges.shape[0]
    adj_mat = torch.sparse_coo_tensor(edges.T, torch.ones(E), (V, V), dtype=torch.int64)
    adj_mat = torch.eye(V) + adj_mat                        # self-loops

    degree_mat = torch.sum(adj_mat, dim=1)
    degree_mat = torch.sqrt(1 / degree_mat)
    degree_mat[degree_mat == float('inf')] = 0
    degree_mat = torch.diag(degree_mat).to_sparse()
    adj_mat = degree_mat @ adj_mat @ degree_mat             # D^-1/2 (A + I) D^-1/2
    return features.to_sparse().to(device), labels.to(device), adj_mat.to_sparse().to(device)


def train_iter(epoch, model, optimizer, criterion, inputs, target, mask_train, mask_val, print_every):
    start_t = time.time()
    model.train()
    optimizer.zero_grad()
    output = model(*inputs)
    loss = criterion(output[mask_train], target[mask_train])
    loss.backward()
    optimizer.step()
    loss_train, acc_train = test(model, criterion, inputs, target, mask_train)
    loss_val, acc_val = test(model, criterion, inputs, target, mask_val)
    if epoch % print_every == 0:
        print(f'Epoch: {epoch:04d} ({(time.time() - start_t):.4f}s) loss_train: {loss_train:.4f} '
              f'acc_train: {acc_train:.4f} loss_val: {loss_val:.4f} acc_val: {acc_val:.4f}')


def test(model, criterion, inputs, target, mask):
    model.eval()
    with torch.no_grad():
        output = model(*inputs)
        output, target = output[mask], target[mask]
        loss = criterion(output, target)
        acc = (output.argmax(dim=1) == target).float().sum() / len(target)
    return loss.item(), acc.item()


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description='PyTorch Graph Convolutional Network')
    parser.add_argument('--data', default='./cora')
    parser.add_argument('--epochs', type=int, default=200)
    parser.add_argument('--lr', type=float, default=0.01)
    parser.add_argument('--l2', type=float, default=5e-4)
    parser.add_argument('--dropout-p', type=float, default=0.5)
    parser.add_argument('--hidden-dim', type=int, default=16)
    parser.add_argument('--val-every', type=int, default=20)
    parser.add_argument('--include-bias', action='store_true')
    parser.add_argument('--no-accel', action='store_true')
    parser.add_argument('--seed', type=int, default=42)
    args = parser.parse_args()

    use_accel = not args.no_accel and torch.accelerator.is_available()
    torch.manual_seed(args.seed)
    device = torch.accelerator.current_accelerator() if use_accel else torch.device('cpu')
    print(f'Using {device} device')

    features, labels, adj_mat = load_cora(args.data, device)
    n = len(labels)
    idx = torch.randperm(n).to(device)
    n_test, n_val = n // 4, n // 4
    idx_test, idx_val, idx_train = idx[:n_test], idx[n_test:n_test + n_val], idx[n_test + n_val:]

    gcn = GCN(features.shape[1], args.hidden_dim, labels.max().item() + 1, args.include_bias,
              args.dropout_p).to(device)
    optimizer = Adam(gcn.parameters(), lr=args.lr, weight_decay=args.l2)
    criterion = nn.NLLLoss()
    for epoch in range(args.epochs):
        train_iter(epoch + 1, gcn, optimizer, criterion, (features, adj_mat), labels, idx_train, idx_val,
                   args.val_every)
    loss_test, acc_test = test(gcn, criterion, (features, adj_mat), labels, idx_test)
    print(f'Test set results: loss {loss_test:.4f} accuracy {acc_test:.4f}')
