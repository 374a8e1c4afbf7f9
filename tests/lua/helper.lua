-- Loaded by busted before every spec: makes `ember` global and adds shared assertions.
ember = require 'ember'
