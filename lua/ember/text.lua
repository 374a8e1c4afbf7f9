-- ember.text: tokenizers for language models (in C: runtime/data/tokenizer.c, ember/text.h)
-- and the token-stream dataset that feeds a corpus to the data pipeline.
--
--   local text = ember.text
--   local tok = text.CharTokenizer(corpus)          -- the distinct bytes of corpus
--   local bpe = text.BPETokenizer(corpus, 512)      -- byte-level BPE with 512 ids
--   local ids = tok:encode('hello')                 -- int64 tensor of 1-based ids
--   print(tok:decode(ids), tok:vocab_size())        -- 'hello'
--   tok:save('runs/x/tokenizer.txt'); tok = text.load('runs/x/tokenizer.txt')
--
-- A corpus for pipelines is a `{format: text, ...}` source (lua/ember/data/source.lua):
--   files: [/usr/share/games/fortunes/*]   paths or shell patterns, read in sorted order
--   exclude: ['*.dat', '*.u8']             base-name patterns to skip
--   tokenizer: char | bpe                  vocab_size: 512 (bpe)
--   block: 64                              tokens per sample (x and y, y shifted by one)
--   part: train | val                      val_fraction: 0.1 (the last tenth of the tokens)
--   samples: N                             training samples per epoch (default: the
--                                          training tokens / block)
--   limit: N                               at most N samples
-- A training sample i of epoch e starts at a uniform offset drawn from its own generator,
-- keyed by (seed, e, i), so the loader's exactly-once order, its resume and every reader
-- agree on it; validation samples are the consecutive blocks of the held-out tail.
local ffi = require 'ffi'
local ember = require 'ember'
local I = require 'ember.internal'
local libc = require 'ember.util.libc'

local C = ember.C
local throw, describe = I.throw, I.describe_value
local M = {}

-- ---------------------------------------------------------------- tokenizers
local Tokenizer = {}
Tokenizer.__index = Tokenizer
M.Tokenizer = Tokenizer

local tok_box = ffi.new('em_tokenizer *[1]')
local function wrap_tokenizer(status)
  local p = tok_box[0]
  tok_box[0] = nil
  if status ~= 0 then I.raise() end
  local t = ffi.gc(p, C.em_tokenizer_free)
  return setmetatable({ handle = t, kind = ffi.string(C.em_tokenizer_kind(t)) }, Tokenizer)
end

local function need_text(op, s)
  if type(s) ~= 'string' then throw(op .. ': expected a string of text, got ' .. describe(s)) end
  return s
end

-- CharTokenizer(text): the distinct bytes of text, in increasing order, are the vocabulary.
function M.CharTokenizer(text)
  need_text('CharTokenizer', text)
  return wrap_tokenizer(C.em_tokenizer_train_char(tok_box, text, #text))
end

-- BPETokenizer(text, vocab_size): byte-level BPE trained on text (256 byte ids + merges).
function M.BPETokenizer(text, vocab_size)
  need_text('BPETokenizer', text)
  I.need_integer('BPETokenizer', vocab_size, 2, 'vocab_size')
  return wrap_tokenizer(C.em_tokenizer_train_bpe(tok_box, text, #text, vocab_size))
end

-- load(path): a tokenizer file written by tok:save.
function M.load(path)
  if type(path) ~= 'string' then throw('text.load: expected a file path, got ' .. describe(path)) end
  return wrap_tokenizer(C.em_tokenizer_load(tok_box, path))
end

function Tokenizer:vocab_size() return tonumber(C.em_tokenizer_vocab_size(self.handle)) end

-- encode(text) -> a 1-d int64 tensor of ids, 1-based.
function Tokenizer:encode(text)
  need_text('encode', text)
  return I.new(C.em_tokenizer_encode(I.box, self.handle, text, #text, 1))
end

-- decode(ids) -> the bytes as a string; ids a tensor (any shape) or a list of 1-based ids.
function Tokenizer:decode(ids)
  if type(ids) == 'table' and not ember.is_tensor(ids) then ids = ember.tensor(ids, { dtype = 'int64' }) end
  if not ember.is_tensor(ids) then throw('decode: expected a tensor or a list of ids, got ' .. describe(ids)) end
  if ids.device ~= 'cpu' then ids = ids:to('cpu') end
  if not ids:is_contiguous() then ids = ids:contiguous() end
  local cap = math.max(ids:numel() * tonumber(C.em_tokenizer_max_piece(self.handle)), 1)
  local buf = ffi.new('uint8_t[?]', cap)
  local len = ffi.new('int64_t[1]')
  I.check(C.em_tokenizer_decode(self.handle, ids, 1, buf, cap, len))
  return ffi.string(buf, tonumber(len[0]))
end

-- piece(id) -> the bytes id (1-based) stands for.
function Tokenizer:piece(id)
  local len = ffi.new('int64_t[1]')
  local p = C.em_tokenizer_piece(self.handle, id - 1, len)
  if p == nil then throw(string.format('piece: id %s is outside 1..%d', tostring(id), self:vocab_size())) end
  return ffi.string(p, tonumber(len[0]))
end

-- merges() -> {{left, right}, ...}: the BPE merges in order, as 1-based ids (merge k makes id 256 + k).
function Tokenizer:merges()
  local out = {}
  local l, r = ffi.new('int64_t[1]'), ffi.new('int64_t[1]')
  for i = 0, tonumber(C.em_tokenizer_num_merges(self.handle)) - 1 do
    I.check(C.em_tokenizer_merge(self.handle, i, l, r))
    out[#out + 1] = { tonumber(l[0]) + 1, tonumber(r[0]) + 1 }
  end
  return out
end

function Tokenizer:save(path)
  if type(path) ~= 'string' then throw('save: expected a file path, got ' .. describe(path)) end
  I.check(C.em_tokenizer_save(self.handle, path))
end

Tokenizer.__tostring = function(self)
  return string.format('%sTokenizer(vocab_size = %d)', self.kind == 'bpe' and 'BPE' or 'Char', self:vocab_size())
end

-- ---------------------------------------------------------------- corpora
-- files(spec) -> the corpus's files in order: spec.files (paths or shell patterns, each
-- pattern's matches sorted) minus base names matching spec.exclude.
function M.files(spec)
  local list = spec.files
  if type(list) == 'string' then list = { list } end
  if type(list) ~= 'table' or #list == 0 then throw('text: files must be a path or a list of paths or patterns') end
  local out = {}
  for _, p in ipairs(list) do
    local matches = p:find('[%*%?%[]') and libc.glob(p) or { p }
    if #matches == 0 then throw(string.format("text: no file matches '%s'", p)) end
    for _, f in ipairs(matches) do
      local base = f:match('([^/]+)$') or f
      local skip = false
      for _, x in ipairs(spec.exclude or {}) do skip = skip or libc.fnmatch(x, base) end
      if not skip then out[#out + 1] = f end
    end
  end
  if #out == 0 then throw('text: every file was excluded') end
  return out
end

-- read(spec) -> the corpus: its files' bytes joined.
function M.read(spec)
  local parts = {}
  for i, f in ipairs(M.files(spec)) do
    local h, err = io.open(f, 'rb')
    if not h then throw(string.format("text: cannot read '%s': %s", f, tostring(err))) end
    parts[i] = h:read('*a')
    h:close()
  end
  return table.concat(parts)
end

-- One corpus per process per (files, tokenizer): the train and val sources and the train
-- job share the bytes, the tokenizer and the tokens.
local cache = {}

local function corpus_key(spec)
  return table.concat(M.files(spec), '\n') .. '\0' .. table.concat(spec.exclude or {}, '\n') .. '\0' ..
    tostring(spec.tokenizer or 'char') .. '\0' .. tostring(spec.vocab_size or 512)
end

-- corpus(spec) -> {tokenizer =, tokens = int64 tensor [N] of 1-based ids, bytes = N bytes read}.
function M.corpus(spec)
  local key = corpus_key(spec)
  if cache[key] then return cache[key] end
  local txt = M.read(spec)
  if #txt < 2 then throw('text: the corpus has fewer than 2 bytes') end
  local kind = spec.tokenizer or 'char'
  local tok
  if kind == 'char' then
    tok = M.CharTokenizer(txt)
  elseif kind == 'bpe' then
    tok = M.BPETokenizer(txt, spec.vocab_size or 512)
  else
    throw("text: tokenizer must be 'char' or 'bpe', got " .. describe(kind))
  end
  local c = { tokenizer = tok, tokens = tok:encode(txt), bytes = #txt }
  cache[key] = c
  return c
end

-- ---------------------------------------------------------------- the token stream
local Stream = {}
Stream.__index = Stream

-- TokenStream(tokens, {block =, part = 'train' | 'val', val_fraction = 0.1, samples =, limit =}):
-- a dataset (size, get_batch) of {x = [block], y = [block]} int64 samples, y = x shifted by one.
function M.TokenStream(tokens, o)
  o = o or {}
  if not ember.is_tensor(tokens) or tokens:dim() ~= 1 then
    throw('TokenStream: expected a 1-d tensor of token ids, got ' .. describe(tokens))
  end
  local block = o.block or 64
  I.need_int('TokenStream', 'block', block, 1)
  local frac = o.val_fraction or 0.1
  if type(frac) ~= 'number' or frac < 0 or frac >= 1 then
    throw('TokenStream: val_fraction must be in [0, 1), got ' .. describe(frac))
  end
  local part = o.part or 'train'
  if part ~= 'train' and part ~= 'val' then
    throw("TokenStream: part must be 'train' or 'val', got " .. describe(part))
  end
  local n = tokens:numel()
  local n_val = math.floor(n * frac)
  local n_train = n - n_val
  local first, len = 0, n_train   -- 0-based start and length of this part
  if part == 'val' then first, len = n_train, n_val end
  if len < block + 1 then
    throw(string.format('TokenStream: the %s part has %d tokens, fewer than block + 1 = %d', part, len, block + 1))
  end
  local size
  if part == 'train' then
    size = o.samples or math.floor((len - 1) / block)
  else
    size = math.floor((len - 1) / block)
  end
  if o.limit then size = math.min(size, o.limit) end
  return setmetatable({ tokens = tokens:contiguous(), block = block, part = part, first = first, len = len,
    n = size }, Stream)
end

function Stream:size() return self.n end

-- The 0-based start (in the whole token list) of sample id (1-based) with its generator.
function Stream:offset(id, rng)
  if self.part == 'train' then return self.first + rng:random(0, self.len - self.block - 1) end
  return self.first + (id - 1) * self.block
end

function Stream:get_batch(ids, rng_of)
  local b, w = ids:numel(), self.block + 1
  local idx = ember.empty({ b * w }, { dtype = 'int64' })
  local p = ffi.cast('int64_t *', idx:data_ptr())
  local ip = ffi.cast('const int64_t *', ids:data_ptr())
  for k = 0, b - 1 do
    local id = tonumber(ip[k])
    local start = self:offset(id, rng_of(id))
    for j = 0, w - 1 do p[k * w + j] = start + j + 1 end
  end
  local rows = self.tokens:index_select(1, idx):view(b, w)
  return { x = rows:narrow(2, 1, self.block), y = rows:narrow(2, 2, self.block) }
end

function Stream:get(id, rng)
  local start = self:offset(id, rng)
  local row = self.tokens:narrow(1, start + 1, self.block + 1)
  return { x = row:narrow(1, 1, self.block), y = row:narrow(1, 2, self.block) }
end

-- The keys of a {format: text} source, and the dataset it opens.
M.SOURCE_KEYS = { files = true, exclude = true, tokenizer = true, vocab_size = true, block = true, part = true,
  val_fraction = true, samples = true }

function M.check_source(spec)
  for k in pairs(spec) do
    if not M.SOURCE_KEYS[k] and k ~= 'format' and k ~= 'limit' then
      throw(string.format("dataset (text): unknown key '%s' (expected files, exclude, tokenizer, vocab_size, block, " ..
        'part, val_fraction, samples, limit)', tostring(k)))
    end
  end
  if spec.files == nil then throw('dataset (text): files is required (paths or shell patterns)') end
  if spec.tokenizer ~= nil and spec.tokenizer ~= 'char' and spec.tokenizer ~= 'bpe' then
    throw("dataset (text): tokenizer must be 'char' or 'bpe', got " .. describe(spec.tokenizer))
  end
  if spec.part ~= nil and spec.part ~= 'train' and spec.part ~= 'val' then
    throw("dataset (text): part must be 'train' or 'val', got " .. describe(spec.part))
  end
end

function M.open_source(spec)
  M.check_source(spec)
  local c = M.corpus(spec)
  return M.TokenStream(c.tokens, { block = spec.block, part = spec.part, val_fraction = spec.val_fraction,
    samples = spec.samples, limit = spec.limit })
end

return M
