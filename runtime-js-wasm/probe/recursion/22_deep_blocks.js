eval("{".repeat(200000)+"}".repeat(200000))
