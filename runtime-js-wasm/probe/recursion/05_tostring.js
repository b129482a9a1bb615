const t={toString(){return String(t)}}; String(t)
