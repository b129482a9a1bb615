new RegExp("(".repeat(200000)+")".repeat(200000))
