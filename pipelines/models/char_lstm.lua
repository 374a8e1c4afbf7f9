-- char-rnn as a model file (pipelines/char_lstm.yaml, examples/char_lstm.lua, examples/sample.lua):
-- token ids [B, T] -> an embedding (char-rnn's one-hot input times a weight matrix, as one
-- lookup) -> a stacked LSTM -> logits [B, T, vocab_size]. forward(x [, state]) also returns
-- the LSTM's final {h, c}, so generation can feed one token at a time.
--   args: vocab_size (filled in by the pipeline from the tokenizer), hidden = 128,
--         layers = 2, dropout = 0 (between LSTM layers), embed = hidden
local nn = require('ember').nn

return function(args)
  local V = assert(args.vocab_size, 'char_lstm: args.vocab_size is required')
  local H, E = args.hidden or 128, args.embed or args.hidden or 128
  local Model = nn.Module:extend('CharLSTM')
  function Model:init()
    self.embed = nn.Embedding(V, E)
    self.lstm = nn.LSTM(E, H, { num_layers = args.layers or 2, batch_first = true, dropout = args.dropout or 0 })
    self.head = nn.Linear(H, V)
    self.recurrent = true   -- examples/sample.lua carries the state instead of a window
  end
  function Model:forward(x, state)
    local h, st = self.lstm(self.embed(x), state)
    return self.head(h), st
  end
  return Model()
end
