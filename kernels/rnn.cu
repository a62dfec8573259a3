// rnn.cu: the fused pointwise cells of the RNN primitive (vanilla RNN, LSTM, GRU), forward and backward.
//
// Algorithm (Appleyard et al. 2016, NVIDIA's LSTM.cu). A layer's work per time step is one small
// recurrent GEMM, gates_h = h @ W_hh^T (done by cuBLAS), followed by pointwise math on the gate
// pre-activations. Done with separate elementwise ops that math is ~10 kernels per step (add the
// biases, 3 sigmoids, tanh, products, the masking ...), each one a launch and a round trip through
// memory. Here each cell is ONE kernel per step that reads the two gate pre-activations (input part
// W_ih x, computed for all steps at once by one big GEMM, and the recurrent part) and the biases, and
// writes the new state, the layer's output y and what backward needs.
//
// Thread mapping: one thread per (batch b, hidden unit j), flat index b * H + j, in a grid-stride
// loop. The thread reads the G gate columns j, H + j, 2H + j, ... of row b: consecutive threads read
// consecutive addresses in each of them, so every load and store is coalesced. A cell needs every
// gate of its own unit and nothing of its neighbours, so there is no communication between threads.
//
// Padded batches: `lengths` (B ints, or nullptr for an unpadded batch) gives each sequence's length.
// A step t >= lengths[b] keeps the state, writes 0 to y and, in backward, passes the incoming
// gradient through untouched and gives zero gate gradients (so the weight GEMMs get nothing from it).
//
// Backward, per step, in place: `dh` holds on entry the gradient of the state this step produced
// (from the step after), to which the kernel adds the output gradient dy[t]. On exit `dh` holds the
// part of the gradient of the step's input state that does NOT go through W_hh: the GRU's z * dh,
// or the whole gradient at a padded step, and 0 otherwise; the launcher then adds
// dgates_h @ W_hh to it with one cuBLAS GEMM (beta = 1). Each thread reads and writes only its own
// element, so updating in place is safe.
//
// Flat indices are long long: T * B * 4H can pass 2^31 for long sequences of big batches.

#include "rnn_cell.cuh"  // the per-element math, shared with the persistent algorithm

// ---------------------------------------------------------------------------------------------
// Vanilla RNN: h' = act(gates_x + b_ih + gates_h + b_hh), act = tanh (relu == 0) or relu (relu == 1).
// gates_x, gates_h (B, H); h_prev, h_next (B, H); y row b at y + b * y_ld (the caller offsets y by
// the direction's H columns).
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void rnn_cell_forward(const float* gates_x, const float* gates_h, const float* b_ih,
                                            const float* b_hh, const float* h_prev, float* h_next,
                                            float* y, long long y_ld, const int* lengths, int t, int B, int H,
                                            int relu)
{
    const long long n = (long long)B * H;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(i / H), j = (int)(i % H);
        if (!step_is_valid(lengths, b, t)) {
            h_next[i] = h_prev[i];
            y[b * y_ld + j] = 0.0f;
            continue;
        }
        const float h = rnn_cell_value(gates_x[i] + bias_at(b_ih, j) + gates_h[i] + bias_at(b_hh, j), relu);
        h_next[i] = h;
        y[b * y_ld + j] = h;
    }
}

// dgates (B, H) = d act / d pre; the same for gates_x and gates_h. h_new (B, H) is the cell's output
// (the state this step produced). dy row b at dy + b * dy_ld, or nullptr for no output gradient.
extern "C" __global__ void rnn_cell_backward(float* dh, const float* dy, long long dy_ld, const float* h_new,
                                             float* dgates, const int* lengths, int t, int B, int H, int relu)
{
    const long long n = (long long)B * H;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(i / H), j = (int)(i % H);
        if (!step_is_valid(lengths, b, t)) {  // dh passes through; y was 0 here, so dy reaches nothing
            dgates[i] = 0.0f;
            continue;
        }
        const float d = dh[i] + (dy == nullptr ? 0.0f : dy[b * dy_ld + j]);
        dgates[i] = rnn_cell_grad(d, h_new[i], relu);
        dh[i] = 0.0f;  // everything else reaches h_prev through W_hh (the GEMM that follows)
    }
}

// ---------------------------------------------------------------------------------------------
// LSTM, gates i, f, g, o (PyTorch's order): c' = f * c + i * g, h' = o * tanh(c').
// gates_x, gates_h (B, 4H); c_prev, c_next (B, H); acts (B, 4H) = [i, f, g, o] for backward, or
// nullptr in inference.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void lstm_cell_forward(const float* gates_x, const float* gates_h, const float* b_ih,
                                             const float* b_hh, const float* h_prev, const float* c_prev,
                                             float* h_next, float* c_next, float* y, long long y_ld,
                                             float* acts, const int* lengths, int t, int B, int H)
{
    const long long n = (long long)B * H;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(i / H), j = (int)(i % H);
        const long long row = (long long)b * 4 * H;  // start of row b of the (B, 4H) gate arrays
        if (!step_is_valid(lengths, b, t)) {
            h_next[i] = h_prev[i];
            c_next[i] = c_prev[i];
            y[b * y_ld + j] = 0.0f;
            if (acts != nullptr) {
                for (int k = 0; k < 4; ++k) acts[row + k * H + j] = 0.0f;
            }
            continue;
        }
        float pre[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const long long col = k * H + j;
            pre[k] = gates_x[row + col] + bias_at(b_ih, col) + gates_h[row + col] + bias_at(b_hh, col);
        }
        float act[4], c, h;
        lstm_cell_value(pre, c_prev[i], act, c, h);
        c_next[i] = c;
        h_next[i] = h;
        y[b * y_ld + j] = h;
        if (acts != nullptr) {
            for (int k = 0; k < 4; ++k) acts[row + k * H + j] = act[k];
        }
    }
}

// dh, dc (B, H) in place (see the header); acts (B, 4H); c_prev, c_new (B, H) the cell state entering
// and leaving the step; dgates (B, 4H) out, the gradient of both gates_x and gates_h.
extern "C" __global__ void lstm_cell_backward(float* dh, float* dc, const float* dy, long long dy_ld,
                                              const float* acts, const float* c_prev, const float* c_new,
                                              float* dgates, const int* lengths, int t, int B, int H)
{
    const long long n = (long long)B * H;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(i / H), j = (int)(i % H);
        const long long row = (long long)b * 4 * H;
        if (!step_is_valid(lengths, b, t)) {  // dh and dc pass through to the step before
            for (int k = 0; k < 4; ++k) dgates[row + k * H + j] = 0.0f;
            continue;
        }
        const float d = dh[i] + (dy == nullptr ? 0.0f : dy[b * dy_ld + j]);
        float act[4], dgate[4], dc_prev;
        for (int k = 0; k < 4; ++k) act[k] = acts[row + k * H + j];
        lstm_cell_grad(d, dc[i], act, c_prev[i], c_new[i], dgate, dc_prev);
        for (int k = 0; k < 4; ++k) dgates[row + k * H + j] = dgate[k];
        dc[i] = dc_prev;
        dh[i] = 0.0f;  // h_prev is reached only through W_hh
    }
}

// ---------------------------------------------------------------------------------------------
// GRU, gates r, z, n (PyTorch's order):
//   r = sigma(x_r + h_r), z = sigma(x_z + h_z), n = tanh(x_n + r * h_n), h' = (1 - z) * n + z * h
// where x_* includes b_ih and h_* includes b_hh. saved (B, 4H) = [r, z, n, h_n] for backward, or
// nullptr in inference: h_n is kept because r multiplies it.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void gru_cell_forward(const float* gates_x, const float* gates_h, const float* b_ih,
                                            const float* b_hh, const float* h_prev, float* h_next, float* y,
                                            long long y_ld, float* saved, const int* lengths, int t, int B, int H)
{
    const long long n = (long long)B * H;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(i / H), j = (int)(i % H);
        const long long row3 = (long long)b * 3 * H;  // row b of the (B, 3H) gate arrays
        const long long row4 = (long long)b * 4 * H;  // row b of saved
        if (!step_is_valid(lengths, b, t)) {
            h_next[i] = h_prev[i];
            y[b * y_ld + j] = 0.0f;
            if (saved != nullptr) {
                for (int k = 0; k < 4; ++k) saved[row4 + k * H + j] = 0.0f;
            }
            continue;
        }
        float keep[4];
        const float h = gru_cell_value(
            gates_x[row3 + j] + bias_at(b_ih, j), gates_x[row3 + H + j] + bias_at(b_ih, H + j),
            gates_x[row3 + 2 * H + j] + bias_at(b_ih, 2 * H + j), gates_h[row3 + j] + bias_at(b_hh, j),
            gates_h[row3 + H + j] + bias_at(b_hh, H + j), gates_h[row3 + 2 * H + j] + bias_at(b_hh, 2 * H + j),
            h_prev[i], keep);
        h_next[i] = h;
        y[b * y_ld + j] = h;
        if (saved != nullptr) {
            for (int k = 0; k < 4; ++k) saved[row4 + k * H + j] = keep[k];
        }
    }
}

// dh (B, H) in place (on exit: z * dh, the part that skips W_hh); saved (B, 4H); h_prev (B, H);
// dgates_x, dgates_h (B, 3H) out: they differ in the n block, where r multiplies h_n.
extern "C" __global__ void gru_cell_backward(float* dh, const float* dy, long long dy_ld, const float* saved,
                                             const float* h_prev, float* dgates_x, float* dgates_h,
                                             const int* lengths, int t, int B, int H)
{
    const long long n = (long long)B * H;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(i / H), j = (int)(i % H);
        const long long row3 = (long long)b * 3 * H;
        const long long row4 = (long long)b * 4 * H;
        if (!step_is_valid(lengths, b, t)) {
            for (int k = 0; k < 3; ++k) {
                dgates_x[row3 + k * H + j] = 0.0f;
                dgates_h[row3 + k * H + j] = 0.0f;
            }
            continue;
        }
        const float d = dh[i] + (dy == nullptr ? 0.0f : dy[b * dy_ld + j]);
        float keep[4], dgate_x[3], dgate_h[3];
        for (int k = 0; k < 4; ++k) keep[k] = saved[row4 + k * H + j];
        dh[i] = gru_cell_grad(d, keep, h_prev[i], dgate_x, dgate_h);  // d * z: the part that skips W_hh
        for (int k = 0; k < 3; ++k) {
            dgates_x[row3 + k * H + j] = dgate_x[k];
            dgates_h[row3 + k * H + j] = dgate_h[k];
        }
    }
}
